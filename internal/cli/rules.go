package cli

import (
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
type RulesReport struct {
	Version string     `json:"version"`
	Rules   []RuleInfo `json:"rules"`
}

// RuleInfo is one rule of a [RulesReport].
type RuleInfo struct {
	Number int    `json:"number"`
	Title  string `json:"title"`
	Kind   string `json:"kind"`
	// EnforcedAt names where a structural rule is enforced; empty for
	// absolute rules, which AUTOMATED_GATES evaluates.
	EnforcedAt string `json:"enforced_at"`
	// Params are the rule's parameters under the configuration; {} when it
	// has none.
	Params map[string]any `json:"params"`
}

// RulesInForce lists every rule with its parameters under cfg (defaults
// applied), in rule-number order.
func RulesInForce(cfg rules.Config) RulesReport {
	rep := RulesReport{Version: rules.Version, Rules: make([]RuleInfo, 0, len(rules.Constitution))}
	for _, r := range rules.Constitution {
		info := RuleInfo{Number: r.Number, Title: r.Title, Kind: string(r.Kind), EnforcedAt: r.EnforcedAt, Params: map[string]any{}}
		if r.Params != nil {
			info.Params = r.Params(cfg)
		}
		rep.Rules = append(rep.Rules, info)
	}
	slices.SortFunc(rep.Rules, func(a, b RuleInfo) int { return a.Number - b.Number })
	return rep
}

// rulesCmd is `sagactl rules`.
type rulesCmd struct {
	cfg rules.Config
	// enc writes -o json or -o yaml; nil writes the table.
	enc encodeFunc
}

// Run prints the constitution: a version line and a table, or JSON.
func (c *rulesCmd) Run(out io.Writer) error {
	rep := RulesInForce(c.cfg)
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
	cmd := &cobra.Command{
		Use:   "rules [--executor-kinds K,…] [--reviewer-ids R,…]",
		Short: "Print the constitution in force: number, title, kind, where enforced, parameters, version",
		Long: `Print every rule of the constitution with its number, title, kind
(structural or absolute), where a structural rule is enforced, and its
parameters, headed by the constitution's version; -o json prints
{"version": …, "rules": [{number, title, kind, enforced_at, params}, …]}.

Works offline (no NATS): parameters are sagad's defaults, with the task kinds
of --executor-kinds and the reviewer ids of --reviewer-ids for Rule 22.

Exit codes: 0 printed, 2 usage.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := &rulesCmd{cfg: rules.Config{ExecutorKinds: kinds, ReviewerIDs: reviewers}, enc: g.encoder()}
			return c.Run(cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringSliceVar(&kinds, "executor-kinds", []string{executors.StubKind}, "task kinds sagad has executors for (Rule 22)")
	cmd.Flags().StringSliceVar(&reviewers, "reviewer-ids", []string{executors.StubReviewerID}, "reviewer ids sagad has reviewers for (Rule 22)")
	return cmd
}
