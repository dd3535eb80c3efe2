package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/rules"
)

// ComposeStep is one step of what `sagactl compose -o json` prints.
type ComposeStep struct {
	Name      string `json:"name"`
	CapsuleID string `json:"capsule_id"`
}

// ComposeResult is what `sagactl compose -o json` prints.
type ComposeResult struct {
	CompositionID string        `json:"composition_id"`
	Run           int           `json:"run"`
	Steps         []ComposeStep `json:"steps"`
}

func newCompose(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "compose FILE|-",
		Short: "Send a composition (a graph of steps) to sagad, which judges it whole and starts it",
		Long: `Send a composition document (schemas/composition.schema.json; a chain
document is one too) to sagad on saga.compose. sagad judges the graph
(unique names, needs that name steps, no cycle) and every step's capsule by
every rule that needs no runtime fact (schema, limits, kinds and reviewers
served, paths, secrets, scope, refs' schemes) before any step starts: a
document that fails is refused whole, nothing started and nothing spent,
and its findings are printed per step (exit 2). Otherwise sagad draws each
step's capsule id, publishes the steps, and this prints the composition id,
its run and each step's name and capsule id (-o json: {"composition_id",
"run", "steps": [{"name", "capsule_id"}]}). The same document again is the
same run; an edited one under the same composition_id starts a new run.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := readInput(cmd, args[0])
			if err != nil {
				return err
			}
			r, err := sendComposition(cmd, g, b)
			if r == nil {
				return err
			}
			res := ComposeResult{CompositionID: r.CompositionID, Run: r.Run, Steps: make([]ComposeStep, len(r.Steps))}
			for i, s := range r.Steps {
				res.Steps[i] = ComposeStep{Name: s.Name, CapsuleID: s.CapsuleID}
			}
			out := cmd.OutOrStdout()
			if enc := g.encoder(); enc != nil {
				if eerr := enc(out, res); eerr != nil {
					return eerr
				}
				return err
			}
			fmt.Fprintf(out, "composition %s run %d\n", printable(res.CompositionID), res.Run)
			tw := table(out)
			fmt.Fprintln(tw, "STEP\tCAPSULE")
			for _, s := range res.Steps {
				fmt.Fprintf(tw, "%s\t%s\n", printable(s.Name), s.CapsuleID)
			}
			_ = tw.Flush()
			return err
		},
	}
}

// CompositionCheck is what `sagactl check --composition -o json` prints.
type CompositionCheck struct {
	OK       bool              `json:"ok"`
	Findings []compose.Finding `json:"findings"`
}

// checkComposition judges a composition offline as sagad does before
// starting it, under cfg (sagad's kinds and reviewers) and models (its
// tiers and prices, which judge a step's task.model).
func checkComposition(cmd *cobra.Command, g *globals, b []byte, cfg rules.Config, models executors.Models) error {
	rep := CompositionCheck{Findings: []compose.Finding{}}
	doc, err := compose.Parse(b)
	var de *compose.DocError
	switch {
	case err == nil:
		rep.Findings = append(rep.Findings, compose.CheckModels(doc, cfg, models, time.Now())...)
	case errors.As(err, &de):
		rep.Findings = append(rep.Findings, de.Findings...)
	default:
		return exit(ExitUsage, err)
	}
	rep.OK = len(rep.Findings) == 0
	out := cmd.OutOrStdout()
	if enc := g.encoder(); enc != nil {
		if err := enc(out, rep); err != nil {
			return err
		}
	} else if rep.OK {
		fmt.Fprintln(out, "ok: no findings")
	} else {
		tw := table(out)
		fmt.Fprintln(tw, "STEP\tNAME\tRULE\tFIELD\tMESSAGE")
		for _, f := range rep.Findings {
			step, rule := "-", "-"
			if f.Step >= 0 {
				step = fmt.Sprint(f.Step)
			}
			if f.Rule != 0 {
				rule = fmt.Sprint(f.Rule)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", step, dash(printable(f.Name)), rule, dash(printable(f.Field)), printable(f.Message))
		}
		_ = tw.Flush()
	}
	if !rep.OK {
		return exit(ExitFailure, nil)
	}
	return nil
}

// defaultRulesConfig is sagad's rules with kinds and reviewers named on
// the command line, the built-in stub ones always there.
func defaultRulesConfig(kinds, reviewers []string) rules.Config {
	return rules.Config{ExecutorKinds: withBuiltin(kinds, executors.StubKind), ReviewerIDs: withBuiltin(reviewers, executors.StubReviewerID)}
}
