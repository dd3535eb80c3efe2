package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/sagad/sagad/adminsvc"
)

// renderPreview prints a replay's preview: -o json as sagad answered it,
// else a summary for people.
func renderPreview(cmd *cobra.Command, g *globals, p adminsvc.ReplayPreviewReply) error {
	if enc := g.encoder(); enc != nil {
		return enc(cmd.OutOrStdout(), p)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "dry run: nothing was changed\ncapsule:     %s\nwould start: run %d at %s (phase %d), cycle %d\n",
		printable(p.CapsuleID), p.Run, p.FromName, int(p.From), p.Cycle)
	halt := "no"
	if p.WouldHalt != nil {
		halt = printable(*p.WouldHalt)
	}
	fmt.Fprintf(w, "would halt:  %s\n", halt)
	for _, f := range p.Findings {
		fmt.Fprintf(w, "  %s: %s\n", dash(f.Field), printable(f.Message))
	}
	if p.WouldWait != "" {
		fmt.Fprintf(w, "would wait:  %s\n", printable(p.WouldWait))
	}
	fmt.Fprintf(w, "budget left: %d tokens, %g dollars\n", p.BudgetLeft.Tokens, p.BudgetLeft.Dollars)
	if p.Reserve.Wave != "" {
		fmt.Fprintf(w, "reserve:     %d tokens, %g dollars against wave %s\n", p.Reserve.Tokens, p.Reserve.Dollars, printable(p.Reserve.Wave))
	} else {
		fmt.Fprintln(w, "reserve:     none")
	}
	if err := previewTables(w, p); err != nil {
		return err
	}
	return nil
}

// previewTables prints the agent calls, locks and dependents of p.
func previewTables(w io.Writer, p adminsvc.ReplayPreviewReply) error {
	if len(p.AgentCalls) > 0 {
		fmt.Fprintln(w, "\nagent calls (first cycle):")
		tw := table(w)
		fmt.Fprintln(tw, "  PHASE\tAGENT\tCYCLE\tWORK")
		for _, c := range p.AgentCalls {
			work := c.Work
			if c.ArtifactRef != "" {
				work += " " + printable(c.ArtifactRef)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\n", c.PhaseName, dash(c.Agent), c.Cycle, work)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(p.Locks) > 0 {
		fmt.Fprintln(w, "\nlocks:")
		tw := table(w)
		fmt.Fprintln(tw, "  PATH\tAVAILABLE")
		for _, l := range p.Locks {
			fmt.Fprintf(tw, "  %s\t%t\n", printable(l.Path), l.Available)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(p.Dependents) > 0 {
		fmt.Fprintln(w, "\ndependents it would wake:")
		tw := table(w)
		fmt.Fprintln(tw, "  CAPSULE\tRUN\tNOTE")
		for _, d := range p.Dependents {
			run := "-"
			if d.Run > 0 {
				run = fmt.Sprint(d.Run)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", printable(d.CapsuleID), run, dash(d.Error))
		}
		return tw.Flush()
	}
	return nil
}
