package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
)

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

func ts(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printStatus prints one capsule's status for people.
func printStatus(w io.Writer, s client.Status) error {
	tw := table(w)
	fmt.Fprintf(tw, "capsule_id:\t%s\n", dash(s.CapsuleID))
	if s.Key != s.CapsuleID {
		fmt.Fprintf(tw, "key:\t%s\n", s.Key)
	}
	fmt.Fprintf(tw, "state:\t%s\n", s.State)
	fmt.Fprintf(tw, "phase:\t%d %s\n", s.Phase, s.PhaseName)
	fmt.Fprintf(tw, "cycles_used:\t%d\n", s.CyclesUsed)
	fmt.Fprintf(tw, "progress:\t%d%%\n", s.Progress)
	if s.HaltReason != "" {
		fmt.Fprintf(tw, "halt_reason:\t%s\n", s.HaltReason)
	}
	fmt.Fprintf(tw, "budget_used:\t%d tokens, $%.4f\n", s.BudgetUsed.Tokens, s.BudgetUsed.Dollars)
	if len(s.ArtifactRefs) > 0 {
		fmt.Fprintf(tw, "artifacts:\t%s\n", strings.Join(s.ArtifactRefs, ", "))
	}
	fmt.Fprintf(tw, "trace_id:\t%s\n", s.TraceID)
	fmt.Fprintf(tw, "updated_at:\t%s\n", ts(s.UpdatedAt))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(s.Findings) > 0 {
		fmt.Fprintln(w, "\nfindings:")
		printFindings(w, s.Findings)
	}
	fmt.Fprintln(w, "\nhistory:")
	tw = table(w)
	fmt.Fprintln(tw, "  AT\tPHASE\tCYCLE\tOUTCOME\tDETAIL")
	for _, h := range s.History {
		fmt.Fprintf(tw, "  %s\t%d %s\t%d\t%s\t%s\n", ts(h.At), h.Phase, h.PhaseName, h.Cycle, h.Outcome, h.Detail)
	}
	return tw.Flush()
}

func printFindings(w io.Writer, fs []capsule.Finding) {
	tw := table(w)
	fmt.Fprintln(tw, "  RULE\tFIELD\tMESSAGE")
	for _, f := range fs {
		rule := "-"
		if f.Rule != 0 {
			rule = fmt.Sprint(f.Rule)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", rule, dash(f.Field), f.Message)
	}
	_ = tw.Flush()
}
