package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/schemas"
)

// chainDoc is a chain document (schemas/chain.schema.json).
type chainDoc struct {
	ChainID string            `json:"chain_id"`
	Steps   []json.RawMessage `json:"steps"`
}

// buildChain turns a chain document into its steps' sealed capsules, in
// order: each gets its deterministic id, depends on the step before and reads
// its final artifact (context ref artifact:<previous id>/final), and carries
// chain {id, step}. The same document always builds the same bytes, so
// publishing it again is idempotent.
func buildChain(b []byte) (chainID string, ids []string, capsules [][]byte, err error) {
	if err := schemas.Validate(schemas.Chain, b); err != nil {
		return "", nil, nil, fmt.Errorf("not a chain: %w", err)
	}
	var doc chainDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return "", nil, nil, fmt.Errorf("not a chain: %w", err)
	}
	prev := ""
	for i, raw := range doc.Steps {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber() // numbers stay as written: they are digested
		var step map[string]any
		if err := dec.Decode(&step); err != nil {
			return "", nil, nil, fmt.Errorf("step %d: %w", i, err)
		}
		id := capsule.ChainStepID(doc.ChainID, i)
		step["capsule_id"] = id
		step["chain"] = map[string]any{"id": doc.ChainID, "step": i}
		refs, _ := step["context_refs"].([]any)
		if refs == nil {
			refs = []any{}
		}
		if prev != "" {
			step["depends_on"] = []any{prev}
			final := "artifact:" + prev + "/final"
			if !slices.Contains(refs, any(final)) {
				refs = append(refs, final)
			}
		}
		step["context_refs"] = refs
		delete(step, "integrity")
		unsealed, err := json.Marshal(step)
		if err != nil {
			return "", nil, nil, fmt.Errorf("step %d: %w", i, err)
		}
		sealed, err := capsule.Seal(unsealed)
		if err != nil {
			return "", nil, nil, fmt.Errorf("step %d: %w", i, err)
		}
		if err := schemas.Validate(schemas.Capsule, sealed); err != nil {
			return "", nil, nil, fmt.Errorf("step %d: not a capsule: %w", i, err)
		}
		ids = append(ids, id)
		capsules = append(capsules, sealed)
		prev = id
	}
	return doc.ChainID, ids, capsules, nil
}

// publishChain publishes every step of the chain document b, in order.
func publishChain(cmd *cobra.Command, g *globals, b []byte) error {
	chainID, ids, capsules, err := buildChain(b)
	if err != nil {
		return exit(ExitUsage, err)
	}
	ctx, cancel := contextWithTimeout(cmd, g)
	defer cancel()
	c, _, closeFn, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	type published struct {
		Step      int    `json:"step"`
		CapsuleID string `json:"capsule_id"`
		IntakeSeq uint64 `json:"intake_seq"`
	}
	steps := make([]published, 0, len(ids))
	for i, raw := range capsules {
		seq, err := c.Publish(ctx, raw, "")
		if err != nil {
			return fmt.Errorf("step %d (%s): %w", i, ids[i], err)
		}
		steps = append(steps, published{Step: i, CapsuleID: ids[i], IntakeSeq: seq})
	}
	out := cmd.OutOrStdout()
	if enc := g.encoder(); enc != nil {
		return enc(out, map[string]any{"chain_id": chainID, "steps": steps})
	}
	for _, id := range ids {
		fmt.Fprintln(out, id)
	}
	return nil
}

func newChain(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "chain CHAIN_ID",
		Short: "Show every step of a chain: id, index, kind, state, phase, halt reason",
		Long: `Show every step of a chain published with sagactl publish --chain, in order:
its capsule id, index, task.kind, state, phase and halt reason (or what it
waits for). Steps are found by their deterministic ids, so no admin service
is needed; a step sagad has not received yet ends the list.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			ch, err := c.Chain(ctx, args[0])
			if err != nil {
				return notFound(err)
			}
			if enc := g.encoder(); enc != nil {
				return enc(cmd.OutOrStdout(), ch)
			}
			return printChain(cmd.OutOrStdout(), ch)
		},
	}
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
