package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/schemas"
)

func newPublish(g *globals) *cobra.Command {
	var seal, raw, wait bool
	var waitTimeout time.Duration
	var traceID, chainFile string
	cmd := &cobra.Command{
		Use:   "publish [--seal] [--raw] FILE|- | publish --chain FILE|-",
		Short: "Publish a capsule to sagad's intake and print its capsule id",
		Long: `Publish a capsule to sagad's intake subject and print its capsule id.

The capsule is checked against the capsule schema first and refused with the
JSON pointers at fault if it is not one (nothing is sent), and refused if its
integrity.sha256 does not match its content (sagad would halt it
integrity_mismatch). --seal fills in integrity.sha256 before publishing. --raw sends the bytes exactly as they are,
unchecked, to see what the daemon does with them (it prints the intake
sequence instead of an id).

--chain FILE sends a chain document (schemas/chain.schema.json) to sagad
(saga.compose), which makes each step a sealed capsule with an id of its
own choosing, depending on the step before and reading its final artifact
(context ref artifact:<previous capsule_id>/final), and carrying chain
{id, step}, and publishes them; it prints the steps' ids in order. The same
document again gets the same ids and starts nothing new; another document
under the same chain_id is refused (exit 5), and so is a step whose id
holds a capsule sagad did not publish for it.

--wait then waits for the capsule as 'sagactl wait' does (--timeout, default
5m), prints its status instead of the id, and exits as wait does (0 only
if it completed).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if chainFile != "" {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if chainFile != "" {
				if seal || raw || traceID != "" || wait {
					return exit(ExitUsage, errors.New("--chain excludes --seal, --raw, --trace-id and --wait (steps are always sealed)"))
				}
				b, err := readInput(cmd, chainFile)
				if err != nil {
					return err
				}
				return publishChain(cmd, g, b)
			}
			if seal && raw {
				return exit(ExitUsage, errors.New("--seal and --raw exclude each other"))
			}
			if !wait && cmd.Flags().Changed("timeout") {
				return exit(ExitUsage, errors.New("--timeout is --wait's: add --wait"))
			}
			if wait && raw {
				return exit(ExitUsage, errors.New("--wait needs a capsule id: it excludes --raw"))
			}
			b, err := readInput(cmd, args[0])
			if err != nil {
				return err
			}
			id := ""
			if !raw {
				if seal {
					if b, err = capsule.Seal(b); err != nil {
						return exit(ExitUsage, fmt.Errorf("not a capsule: %w", err))
					}
				}
				if err := schemas.Validate(schemas.Capsule, b); err != nil {
					var verr *schemas.ValidationError
					if errors.As(err, &verr) && slices.ContainsFunc(verr.Pointers, func(p string) bool {
						return p == "/integrity" || strings.HasPrefix(p, "/integrity/")
					}) {
						return exit(ExitUsage, fmt.Errorf("not a capsule: %w\nsagactl: (not sealed? publish --seal fills in integrity.sha256; sagactl seal FILE prints it sealed)", err))
					}
					return exit(ExitUsage, fmt.Errorf("not a capsule: %w", err))
				}
				// sagad would halt it integrity_mismatch at once: most often
				// a capsule edited after sealing.
				if err := capsule.VerifyIntegrity(b); err != nil {
					return exit(ExitUsage, fmt.Errorf("%w\nsagactl: (edited after sealing? publish --seal recomputes the digest; --raw sends it as is)", err))
				}
				var c capsule.Capsule
				if err := json.Unmarshal(b, &c); err != nil {
					return exit(ExitUsage, fmt.Errorf("not a capsule: %w", err))
				}
				id = c.CapsuleID
			}
			ctx, cancel := contextWithTimeout(cmd, g)
			defer cancel()
			client, closeFn, err := g.publisher()
			if err != nil {
				return err
			}
			defer closeFn()
			seq, err := client.Publish(ctx, b, traceID)
			if err != nil {
				return err
			}
			if wait {
				closeFn()
				return waitFor(cmd, g, id, waitTimeout)
			}
			out := cmd.OutOrStdout()
			if enc := g.encoder(); enc != nil {
				return enc(out, map[string]any{"capsule_id": id, "intake_seq": seq})
			}
			if id == "" {
				fmt.Fprintf(out, "published raw bytes as intake message %d (see: sagactl list --state halted)\n", seq)
				return nil
			}
			fmt.Fprintln(out, printable(id))
			return nil
		},
	}
	cmd.Flags().BoolVar(&seal, "seal", false, "compute and fill integrity.sha256 before publishing")
	cmd.Flags().BoolVar(&raw, "raw", false, "send the bytes exactly as they are, unchecked")
	cmd.Flags().StringVar(&traceID, "trace-id", "", "trace id header for a capsule without trace_id")
	cmd.Flags().StringVar(&chainFile, "chain", "", "publish the steps of a chain document (FILE or - for stdin)")
	cmd.Flags().BoolVar(&wait, "wait", false, "then wait for the capsule to end or need a human, as 'sagactl wait' does")
	cmd.Flags().DurationVar(&waitTimeout, "timeout", 5*time.Minute, "with --wait: give up waiting after this long")
	return cmd
}

func newSeal(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "seal FILE|-",
		Short: "Print the capsule with integrity.sha256 filled in (RFC 8785 canonical SHA-256)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := readInput(cmd, args[0])
			if err != nil {
				return err
			}
			sealed, err := capsule.Seal(b)
			if err != nil {
				return exit(ExitUsage, fmt.Errorf("seal: %w", err))
			}
			_, err = cmd.OutOrStdout().Write(sealed)
			return err
		},
	}
}
