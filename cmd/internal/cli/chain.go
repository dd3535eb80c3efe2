package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/compose"
)

// publishChain sends the chain document b to sagad's compose service,
// which assigns the steps' ids and publishes them, and prints the ids. It
// fails (ExitRefused) when a step's capsule id holds a capsule that is not
// the one sagad published for this producer.
func publishChain(cmd *cobra.Command, g *globals, b []byte) error {
	r, err := sendComposition(cmd, g, b)
	if r == nil {
		return err
	}
	out := cmd.OutOrStdout()
	if enc := g.encoder(); enc != nil {
		if err := enc(out, r); err != nil {
			return err
		}
	} else {
		for _, s := range r.Steps {
			fmt.Fprintln(out, s.CapsuleID)
		}
	}
	return err
}

// sendComposition judges the document b offline (its shape: the graph,
// each step a capsule), sends it to sagad and returns sagad's reply. A
// refused document is an ExitUsage error whose findings were printed on
// stderr, one a line. With a reply, err is non-nil when a step's id holds
// a capsule sagad did not publish for it (ExitRefused).
func sendComposition(cmd *cobra.Command, g *globals, b []byte) (*compose.Reply, error) {
	// Refused before dialling, in the schema's words: the document, then
	// its steps as capsules (built under throwaway ids; sagad assigns the
	// real ones).
	doc, err := compose.Parse(b)
	if err == nil {
		if fs := compose.Shape(doc); len(fs) > 0 {
			err = &compose.DocError{Findings: fs}
		}
	}
	if err != nil {
		return nil, exit(ExitUsage, err)
	}
	ctx, cancel := contextWithTimeout(cmd, g)
	defer cancel()
	nc, err := g.dialNATS()
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	stop := func() {}
	if g.encoder() == nil {
		stop = composeProgress(ctx, cmd.ErrOrStderr(), nc, doc.ID)
	}
	r, err := compose.Publish(ctx, nc, b)
	stop()
	var re *compose.RequestError
	switch {
	case errors.Is(err, compose.ErrNoSagad):
		return nil, exit(ExitNoSagad, err)
	case errors.As(err, &re) && re.Code == compose.CodeBadRequest:
		return nil, exit(ExitUsage, err)
	case errors.As(err, &re) && re.Code == compose.CodeInvalid:
		return nil, exit(ExitUsage, &compose.DocError{Findings: re.Findings})
	case err != nil:
		return nil, err
	}
	var foreign []string
	for _, s := range r.Steps {
		if s.State == compose.StepForeign {
			foreign = append(foreign, fmt.Sprintf("step %d (%s)", s.Step, s.CapsuleID))
		}
		if s.State == compose.StepRefused {
			fmt.Fprintf(cmd.ErrOrStderr(), "step %d (%s) halted at RECEPTION: %s\n", s.Step, s.CapsuleID, printable(s.HaltReason))
		}
	}
	if len(foreign) > 0 {
		return &r, exit(ExitRefused, fmt.Errorf("composition %s: the capsule accepted as %s is not the one sagad published for it: do not trust its results", r.CompositionID, strings.Join(foreign, ", ")))
	}
	return &r, nil
}

func newChain(g *globals) *cobra.Command {
	var producer string
	cmd := &cobra.Command{
		Use:   "chain CHAIN_ID",
		Short: "Show every step of a chain: id, index, kind, state, phase, halt reason",
		Long: `Show every step of a chain published with sagactl publish --chain, in order:
its capsule id, index, task.kind, state, phase and halt reason (or what it
waits for). Read through sagad's admin service (saga.admin.chain). Chain ids
are per producer: when several producers used CHAIN_ID, name one with
--producer. A step RECEPTION has not received yet shows state pending; a
step whose id holds a capsule sagad did not publish for it shows foreign.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, a, done, err := g.dialAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			req := adminsvc.ChainRequest{ChainID: args[0]}
			if cmd.Flags().Changed("producer") {
				p := producer
				if p == "-" {
					p = ""
				}
				req.Producer = &p
			}
			ch, err := a.Chain(ctx, req)
			if err != nil {
				return adminErr(err)
			}
			if enc := g.encoder(); enc != nil {
				return enc(cmd.OutOrStdout(), ch)
			}
			return printChain(cmd.OutOrStdout(), ch)
		},
	}
	cmd.Flags().StringVar(&producer, "producer", "", "whose chain, when several producers used the id (- for sagad's own)")
	return cmd
}

func printChain(w io.Writer, ch client.Chain) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tCAPSULE\tKIND\tSTATE\tPHASE\tREASON")
	for _, s := range ch.Steps {
		reason := s.HaltReason
		if reason == "" && len(s.WaitingFor) > 0 {
			reason = fmt.Sprintf("waiting for %v", s.WaitingFor)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", s.Step, s.CapsuleID, printable(s.Kind), s.State, s.PhaseName, printable(reason))
	}
	return tw.Flush()
}
