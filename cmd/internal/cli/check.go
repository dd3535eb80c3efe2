package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
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
	// Hint says how to mend the commonest halt, a capsule not sealed or
	// edited after sealing; empty otherwise.
	Hint string `json:"hint,omitempty"`
}

// Hints of [CheckReport.Hint].
const (
	hintUnsealed = "not sealed: sagactl seal FILE prints it with integrity.sha256 filled in; or publish it with sagactl publish --seal FILE"
	hintEdited   = "edited after sealing? sagactl seal FILE prints it with integrity.sha256 recomputed; or publish it with sagactl publish --seal FILE"
)

// sealHint is the hint for a capsule whose integrity is missing or wrong.
func sealHint(halt string, findings []capsule.Finding) string {
	switch capsule.ParseHaltReason(halt).Code {
	case capsule.CodeIntegrityMismatch:
		return hintEdited
	case capsule.CodeSchemaInvalid:
	default:
		return ""
	}
	for _, f := range findings {
		if f.Field == "/integrity" || strings.HasPrefix(f.Field, "/integrity/") {
			return hintUnsealed
		}
	}
	return ""
}

// offlineLocks answers "available" for every lock: availability is a live
// fact, reported as not evaluated.
type offlineLocks struct{ phases.Locks }

func (offlineLocks) Available(context.Context, string, string) (bool, error) { return true, nil }

// Check evaluates a capsule offline: everything RECEPTION checks but lock
// availability, the spec's definition of ready, and every absolute rule.
func Check(raw []byte, cfg rules.Config, now time.Time) CheckReport {
	return CheckModels(raw, cfg, executors.Models{}, now)
}

// CheckModels is [Check] with sagad's models config, which task.model is
// judged by (model_not_allowed).
func CheckModels(raw []byte, cfg rules.Config, models executors.Models, now time.Time) CheckReport {
	cfg = cfg.WithDefaults()
	rep := CheckReport{Findings: []capsule.Finding{}, NotEvaluated: []string{
		"lock availability (RECEPTION)", "context_refs and target existence (REALITY_ANCHOR)",
	}}
	reg := executors.NewRegistry()
	reg.SetModels(models)
	env := &phases.Env{Locks: offlineLocks{}, Rules: cfg, Executors: reg, Now: func() time.Time { return now }}
	r := phases.Receive(context.Background(), env, raw, func(id string) string { return id })
	if r.Decision.Action == phases.Halt {
		rep.HaltReason = r.Decision.Halt.String()
		rep.Findings = append(rep.Findings, r.Decision.Findings...)
		if len(r.Decision.Findings) == 0 {
			rep.Findings = append(rep.Findings, capsule.Finding{Message: rep.HaltReason})
		}
	}
	if r.Capsule == nil {
		rep.Hint = sealHint(rep.HaltReason, rep.Findings)
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
	rep.Hint = sealHint(rep.HaltReason, rep.Findings)
	return rep
}

func newCheck(g *globals) *cobra.Command {
	var kinds, reviewers []string
	var composition bool
	var config string
	cmd := &cobra.Command{
		Use:   "check [--composition] [--config SAGAD.json] FILE|-",
		Short: "Dry-run a capsule locally (no NATS): schema, integrity, deadline, budget, spec, absolute rules",
		Long: `Evaluate a capsule the way sagad would, without NATS: size, JSON, schema
version, schema, integrity, deadline and budget positivity (RECEPTION), the
definition of ready (PLANNING) and every absolute rule of the constitution
with its default configuration. Every finding is printed with its rule
number, field and message; what needs live pipeline facts (lock availability,
ref existence, rules 2, 19, 24 live parts) is listed as not evaluated.
A capsule not sealed, or edited after sealing, gets a hint to seal it.
--executor-kinds and --reviewer-ids name sagad's configured executors and
reviewers; the built-in stub executor and reviewer are always there, as in
sagad. --config reads them from sagad's config file instead, with its
"models": a task.model none of its tiers and prices lists would halt
model_not_allowed (without --config every task.model would). Exit 0 only if clean, 1 with findings, 2 if the file cannot be read.

--composition judges a composition (or chain) document as sagad does
before starting it: the graph, then every step as the capsule sagad would
build, with the findings per step; the same verdict as sagactl compose.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := readInput(cmd, args[0])
			if err != nil {
				return err
			}
			// sagad always has its built-in stub executor and reviewer
			// (executors.Config.Names): the flags name the others.
			var sagad executors.Config
			if config != "" {
				if sagad, err = readSagadConfig(config); err != nil {
					return exit(ExitUsage, err)
				}
				k, r := sagad.Names()
				kinds, reviewers = append(kinds, k...), append(reviewers, r...)
			}
			cfg := defaultRulesConfig(kinds, reviewers)
			if composition {
				return checkComposition(cmd, g, b, cfg, sagad.Models)
			}
			rep := CheckModels(b, cfg, sagad.Models, time.Now())
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
				if rep.Hint != "" {
					fmt.Fprintf(out, "hint: %s\n", strings.ReplaceAll(rep.Hint, "FILE", printable(args[0])))
				}
			}
			if !rep.OK {
				return exit(ExitFailure, nil)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "sagad's config file: its executors, reviewers and models (task.model) judge the capsule")
	cmd.Flags().BoolVar(&composition, "composition", false, "FILE is a composition (or chain) document: judge it whole, as sagad does before starting it")
	cmd.Flags().StringSliceVar(&kinds, "executor-kinds", nil, "task kinds sagad has executors for besides the built-in "+executors.StubKind+" (Rule 22)")
	cmd.Flags().StringSliceVar(&reviewers, "reviewer-ids", nil, "reviewer ids sagad has reviewers for besides the built-in "+executors.StubReviewerID+" (Rule 22)")
	return cmd
}

// withBuiltin is names with builtin added, sorted, each once.
func withBuiltin(names []string, builtin string) []string {
	out := append(slices.Clone(names), builtin)
	slices.Sort(out)
	return slices.Compact(out)
}
