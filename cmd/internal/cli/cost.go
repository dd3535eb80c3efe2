package cli

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/costs"
)

// newCost builds `sagactl cost`, a request to sagad's admin service
// (saga.admin.cost).
func newCost(g *globals) *cobra.Command {
	var by, since string
	var limit int
	cmd := &cobra.Command{
		Use:   "cost [--by wave|chain|composition|producer|kind|day] [--since T]",
		Short: "What capsules spent: tokens and dollars per group, failed runs' share, reservations outstanding",
		Long: `Sum what capsules spent, from their checkpoints: tokens and dollars per
wave (the default), chain, producer, task kind or day of arrival, with the
part spent by capsules that halted or were cancelled (FAILED: it bought no
result; failed attempts' charges are in every capsule's spend), the failed
agent calls recorded, and the wave reservations running capsules still hold.

--since counts only capsules that arrived at or after T: an RFC 3339 time,
a date (2006-01-02, UTC) or a duration back from now (24h, 7d). --by
composition groups by the composition a capsule is a step of (<id>#<run>
from its run 2). Past --limit groups the rest
fold into "other".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !costs.ValidBy(by) {
				return exit(ExitUsage, fmt.Errorf("--by %q: want one of %s", printable(by), strings.Join(costs.Groupings, ", ")))
			}
			if limit < 0 || limit > costs.MaxGroups {
				return exit(ExitUsage, fmt.Errorf("--limit %d: want 1 to %d (0: %d)", limit, costs.MaxGroups, costs.DefaultGroups))
			}
			req := adminsvc.CostRequest{By: by, Limit: limit}
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return exit(ExitUsage, err)
				}
				req.Since = &t
			}
			ctx, a, done, err := g.dialAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			r, err := a.Cost(ctx, req)
			if err != nil {
				return adminErr(err)
			}
			return printCost(cmd, g, r)
		},
	}
	cmd.Flags().StringVar(&by, "by", costs.ByWave, "group by "+strings.Join(costs.Groupings, ", "))
	cmd.Flags().StringVar(&since, "since", "", "only capsules that arrived at or after: an RFC 3339 time, a date or a duration ago (24h, 7d)")
	cmd.Flags().IntVar(&limit, "limit", 0, fmt.Sprintf("groups listed, the rest folded into \"other\" (0: %d)", costs.DefaultGroups))
	addNoHeaders(cmd, g)
	return cmd
}

// parseSince reads --since: an RFC 3339 time, a date, or a duration (with
// d for days) back from now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if d, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(d); err == nil && n >= 0 {
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("--since %q: want an RFC 3339 time, a date (2006-01-02) or a duration ago (24h, 7d)", printable(s))
}

// printCost prints a cost report: -o json/yaml the reply, else a table of
// the groups and the total.
func printCost(cmd *cobra.Command, g *globals, r adminsvc.CostReply) error {
	out := cmd.OutOrStdout()
	if enc := g.encoder(); enc != nil {
		return enc(out, r)
	}
	tw := g.listTable(out)
	fmt.Fprintf(tw, "%s\tCAPSULES\tTOKENS\tDOLLARS\tFAILED\tFAILED ATTEMPTS\tRESERVED TOKENS\tRESERVED DOLLARS\n", strings.ToUpper(r.By))
	row := func(gr costs.Group) {
		tokens := thousands(gr.Tokens)
		if gr.EstimatedCapsules > 0 {
			// Some of the tokens are sagad's estimate, not reported.
			tokens += fmt.Sprintf(" (%d estimated)", gr.EstimatedCapsules)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\n", named(gr.Name, gr.Key), gr.Capsules, tokens, dollars(gr.Dollars),
			percent(gr.FailedShare), gr.FailedAttempts, thousands(gr.ReservedTokens), dollars(gr.ReservedDollars))
	}
	for _, gr := range r.Groups {
		row(gr)
	}
	row(r.Total)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Unpriced) > 0 {
		fmt.Fprintln(cmd.ErrOrStderr(), "note: no price for "+strings.Join(printables(r.Unpriced), ", ")+": their calls charged tokens only, not dollars (sagactl models)")
	}
	if r.Note != "" {
		fmt.Fprintln(cmd.ErrOrStderr(), "note: "+r.Note)
	}
	return nil
}

// thousands writes n with commas: 1,234,567.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// dollars writes an amount to the cent: $0.06.
func dollars(d float64) string { return fmt.Sprintf("$%.2f", d) }

// percent writes a share of 0 to 1 as 12.5%.
func percent(f float64) string { return strconv.FormatFloat(math.Round(f*1000)/10, 'f', -1, 64) + "%" }
