package cli

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/rules"
)

// RulesReport is what `sagactl rules -o json` prints: the constitution in
// force and its version.
type RulesReport = rules.Report

// RuleInfo is one rule of a [RulesReport].
type RuleInfo = rules.RuleInfo

// RulesInForce lists every rule with its parameters under cfg (defaults
// applied), in rule-number order.
func RulesInForce(cfg rules.Config) RulesReport { return rules.InForce(cfg) }

// rulesCmd is `sagactl rules`.
type rulesCmd struct {
	rep RulesReport
	// enc writes -o json or -o yaml; nil writes the table.
	enc encodeFunc
}

// Run prints the constitution: a version line and a table, or JSON.
func (c *rulesCmd) Run(out io.Writer) error {
	rep := c.rep
	if c.enc != nil {
		return c.enc(out, rep)
	}
	fmt.Fprintf(out, "constitution version %s (%d rules)\n\n", rep.Version, len(rep.Rules))
	tw := table(out)
	fmt.Fprintln(tw, "NUMBER\tTITLE\tKIND\tENFORCED_AT\tPARAMS")
	for _, r := range rep.Rules {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", r.Number, printable(r.Title), printable(r.Kind), dash(r.EnforcedAt), dash(formatParams(r.Params)))
	}
	return tw.Flush()
}

// formatParams renders params as "k=v k=v", keys sorted, lists as [a,b].
func formatParams(p map[string]any) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+formatValue(p[k]))
	}
	return strings.Join(parts, " ")
}

func formatValue(v any) string {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Slice {
		items := make([]string, rv.Len())
		for i := range items {
			items[i] = fmt.Sprint(rv.Index(i).Interface())
		}
		return "[" + strings.Join(items, ",") + "]"
	}
	return fmt.Sprint(v)
}

func newRules(g *globals) *cobra.Command {
	var kinds, reviewers []string
	var offline bool
	cmd := &cobra.Command{
		Use:   "rules [--offline [--executor-kinds K,…] [--reviewer-ids R,…]]",
		Short: "Print the constitution sagad enforces: number, title, kind, where enforced, parameters, version",
		Long: `Print every rule of the constitution with its number, title, kind
(structural or absolute), where a structural rule is enforced, and its
parameters, headed by the constitution's version; -o json prints
{"version": …, "rules": [{number, title, kind, enforced_at, params}, …]}.

The parameters are those the running sagad enforces (its config file's
"constitution" and "default_reviewer", its executors and reviewers), asked of
its admin service (saga.admin.rules).

--offline needs no NATS and prints the built-in defaults instead, with the
task kinds of --executor-kinds and the reviewer ids of --reviewer-ids for
Rule 22.

Exit codes: 0 printed, 1 error, 2 usage, 6 no sagad answered.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !offline {
				if cmd.Flags().Changed("executor-kinds") || cmd.Flags().Changed("reviewer-ids") {
					return exit(ExitUsage, errors.New("--executor-kinds and --reviewer-ids need --offline: a running sagad reports its own"))
				}
				ctx, a, done, err := g.dialAdmin(cmd)
				if err != nil {
					return err
				}
				defer done()
				rep, err := a.Rules(ctx)
				if err != nil {
					return adminErr(err)
				}
				return (&rulesCmd{rep: rep, enc: g.encoder()}).Run(cmd.OutOrStdout())
			}
			rep := RulesInForce(rules.Config{ExecutorKinds: withBuiltin(kinds, executors.StubKind), ReviewerIDs: withBuiltin(reviewers, executors.StubReviewerID)})
			return (&rulesCmd{rep: rep, enc: g.encoder()}).Run(cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&offline, "offline", false, "print the built-in defaults without asking sagad (no NATS)")
	cmd.Flags().StringSliceVar(&kinds, "executor-kinds", nil, "with --offline: task kinds sagad has executors for besides the built-in "+executors.StubKind+" (Rule 22)")
	cmd.Flags().StringSliceVar(&reviewers, "reviewer-ids", nil, "with --offline: reviewer ids sagad has reviewers for besides the built-in "+executors.StubReviewerID+" (Rule 22)")
	return cmd
}
