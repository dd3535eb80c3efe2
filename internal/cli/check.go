package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/phases"
	"github.com/sagad/sagad/rules"
)

// CheckReport is what `sagactl check -o json` prints.
type CheckReport struct {
	OK bool `json:"ok"`
	// HaltReason is the first halt the pipeline would give this capsule, as
	// far as can be told offline; empty when none.
	HaltReason string            `json:"halt_reason"`
	Findings   []capsule.Finding `json:"findings"`
	// NotEvaluated lists what needs live pipeline facts and was skipped.
	NotEvaluated []string `json:"not_evaluated"`
}

// offlineLocks answers "available" for every lock: availability is a live
// fact, reported as not evaluated.
type offlineLocks struct{ phases.Locks }

func (offlineLocks) Available(context.Context, string, string) (bool, error) { return true, nil }

// Check evaluates a capsule offline: everything RECEPTION checks but lock
// availability, the spec's definition of ready, and every absolute rule.
func Check(raw []byte, cfg rules.Config, now time.Time) CheckReport {
	cfg = cfg.WithDefaults()
	rep := CheckReport{Findings: []capsule.Finding{}, NotEvaluated: []string{
		"lock availability (RECEPTION)", "context_refs and target existence (REALITY_ANCHOR)",
	}}
	env := &phases.Env{Locks: offlineLocks{}, Rules: cfg, Now: func() time.Time { return now }}
	r := phases.Receive(context.Background(), env, raw, func(id string) string { return id })
	if r.Decision.Action == phases.Halt {
		rep.HaltReason = r.Decision.Halt.String()
		rep.Findings = append(rep.Findings, r.Decision.Findings...)
		if len(r.Decision.Findings) == 0 {
			rep.Findings = append(rep.Findings, capsule.Finding{Message: rep.HaltReason})
		}
	}
	if r.Capsule == nil {
		return rep
	}
	if missing := phases.MissingSpecFields(r.Capsule.Spec); len(missing) > 0 {
		d := phases.Planning{}.Run(context.Background(), env, &phases.Input{Capsule: r.Capsule})
		if rep.HaltReason == "" {
			rep.HaltReason = d.Halt.String()
		}
		rep.Findings = append(rep.Findings, d.Findings...)
	}
	res := rules.Evaluate(context.Background(), rules.Input{Capsule: r.Capsule, Raw: raw, Config: cfg, Now: now})
	if len(res.Violated) > 0 {
		if rep.HaltReason == "" {
			rep.HaltReason = res.Halt().String()
		}
		rep.Findings = append(rep.Findings, res.Findings...)
	}
	for _, n := range res.NotEvaluated {
		rl, _ := rules.Lookup(n)
		rep.NotEvaluated = append(rep.NotEvaluated, fmt.Sprintf("rule %d %s (live part)", n, rl.Title))
	}
	rep.OK = rep.HaltReason == "" && len(rep.Findings) == 0
	return rep
}

func newCheck(g *globals) *cobra.Command {
	var kinds, reviewers []string
	cmd := &cobra.Command{
		Use:   "check FILE|-",
		Short: "Dry-run a capsule locally (no NATS): schema, integrity, deadline, budget, spec, absolute rules",
		Long: `Evaluate a capsule the way sagad would, without NATS: size, JSON, schema
version, schema, integrity, deadline and budget positivity (RECEPTION), the
definition of ready (PLANNING) and every absolute rule of the constitution
with its default configuration. Every finding is printed with its rule
number, field and message; what needs live pipeline facts (lock availability,
ref existence, rules 2, 19, 24 live parts) is listed as not evaluated.
Exit 0 only if clean, 1 with findings, 2 if the file cannot be read.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := readInput(cmd, args[0])
			if err != nil {
				return err
			}
			cfg := rules.Config{ExecutorKinds: kinds, ReviewerIDs: reviewers}
			rep := Check(b, cfg, time.Now())
			out := cmd.OutOrStdout()
			if enc := g.encoder(); enc != nil {
				if err := enc(out, rep); err != nil {
					return err
				}
			} else {
				if rep.OK {
					fmt.Fprintln(out, "ok: no findings")
				} else {
					fmt.Fprintf(out, "would halt: %s\n", printable(rep.HaltReason))
					printFindings(out, rep.Findings)
				}
				for _, n := range rep.NotEvaluated {
					fmt.Fprintf(out, "not evaluated: %s\n", printable(n))
				}
			}
			if !rep.OK {
				return exit(ExitFailure, nil)
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&kinds, "executor-kinds", []string{executors.StubKind}, "task kinds sagad has executors for (Rule 22)")
	cmd.Flags().StringSliceVar(&reviewers, "reviewer-ids", []string{executors.StubReviewerID}, "reviewer ids sagad has reviewers for (Rule 22)")
	return cmd
}
