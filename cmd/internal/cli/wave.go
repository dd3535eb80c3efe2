package cli

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/budget"
)

// newWave builds `sagactl wave set|show|list|close`, requests to sagad's
// admin service (saga.admin.wave.*).
func newWave(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "wave set|show|list|close",
		Short: "Set, show, list and close waves: shared token and dollar budgets that admit capsules",
		Long: `A wave is a budget that capsules share: a capsule with "wave_id" reserves its
caps (budget.tokens, budget.dollars) against what the wave has left when it
reaches AUTOMATED_GATES, before anything is spent. One that does not fit
waits (state waiting, waiting_on wave_capacity) and goes on by itself, oldest
first, when a running capsule of the wave ends and releases what it did not
use, or when the wave's cap is raised. Closing a wave halts its waiting
capsules with wave_closed:<wave>; its running capsules finish.

Exit 5 (refused) for a cap change on a closed wave, 4 for an unknown wave,
6 when no sagad answers.`,
	}
	var by, reason string
	var tokens int64
	var dollars float64
	var producers string
	set := &cobra.Command{
		Use:   "set WAVE [--tokens N] [--dollars X] [--producers a,b]",
		Short: "Create a wave or change its caps (0 is no cap; a cap left out stays) or who may join it",
		Long: `Create a wave or change its caps. --tokens and --dollars set the caps (0 is
no cap); a flag left out keeps the cap as it is. Raising a cap lets waiting
capsules go on at once; lowering it below what is used and reserved admits
no one until enough is released. --producers a,b admits only those
producers' capsules from now on (others halt wave_not_admitted:<wave> at
AUTOMATED_GATES); --producers '' admits any again. Exit 5 if the wave is
closed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkWaveArg(args[0]); err != nil {
				return err
			}
			req := adminsvc.WaveSetRequest{WaveID: args[0], By: operator(by), Reason: reason}
			if cmd.Flags().Changed("tokens") {
				if tokens < 0 {
					return exit(ExitUsage, fmt.Errorf("--tokens %d: want 0 (no cap) or more", tokens))
				}
				req.Tokens = &tokens
			}
			if cmd.Flags().Changed("dollars") {
				if !(dollars >= 0) || math.IsInf(dollars, 0) {
					return exit(ExitUsage, fmt.Errorf("--dollars %v: want 0 (no cap) or more", dollars))
				}
				req.Dollars = &dollars
			}
			if cmd.Flags().Changed("producers") {
				list := []string{}
				for _, p := range strings.Split(producers, ",") {
					if p = strings.TrimSpace(p); p == "" {
						continue
					}
					if !budget.ValidWaveID(p) {
						return exit(ExitUsage, fmt.Errorf("--producers: %q: want 1 to 64 of [A-Za-z0-9_-]", printable(p)))
					}
					list = append(list, p)
				}
				req.Producers = &list
			}
			ctx, a, done, err := g.dialAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			w, err := a.SetWave(ctx, req)
			if err != nil {
				return adminErr(err)
			}
			return printWave(cmd, g, w)
		},
	}
	set.Flags().Int64Var(&tokens, "tokens", 0, "the wave's token cap (0: none)")
	set.Flags().Float64Var(&dollars, "dollars", 0, "the wave's dollar cap (0: none)")
	set.Flags().StringVar(&producers, "producers", "", "comma-separated producers whose capsules may join the wave ('': any)")
	closeCmd := &cobra.Command{
		Use:   "close WAVE",
		Short: "Close a wave for good: its waiting capsules halt wave_closed:<wave>, running ones finish",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkWaveArg(args[0]); err != nil {
				return err
			}
			ctx, a, done, err := g.dialAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			w, err := a.CloseWave(ctx, adminsvc.WaveCloseRequest{WaveID: args[0], By: operator(by), Reason: reason})
			if err != nil {
				return adminErr(err)
			}
			return printWave(cmd, g, w)
		},
	}
	for _, c := range []*cobra.Command{set, closeCmd} {
		c.Flags().StringVar(&by, "by", "", "who (logged by sagad; default $SAGA_OPERATOR or the login name)")
		c.Flags().StringVar(&reason, "reason", "", "why (logged by sagad)")
	}
	show := &cobra.Command{
		Use:   "show WAVE",
		Short: "Show a wave: caps, used, reserved, left, running and waiting capsules",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkWaveArg(args[0]); err != nil {
				return err
			}
			ctx, a, done, err := g.dialAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			w, err := a.Wave(ctx, args[0])
			if err != nil {
				return adminErr(err)
			}
			return printWave(cmd, g, w)
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List every wave",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, a, done, err := g.dialAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			waves, err := a.Waves(ctx)
			if err != nil {
				return adminErr(err)
			}
			out := cmd.OutOrStdout()
			if enc := g.encoder(); enc != nil {
				if waves == nil {
					waves = []admin.WaveInfo{}
				}
				return enc(out, waves)
			}
			tw := g.listTable(out)
			fmt.Fprintln(tw, "WAVE\tSTATE\tTOKENS (USED/RESERVED/CAP)\tDOLLARS (USED/RESERVED/CAP)\tRUNNING\tWAITING")
			for _, w := range waves {
				fmt.Fprintf(tw, "%s\t%s\t%d/%d/%s\t%s/%s/%s\t%d\t%d\n", named(w.Composition, w.WaveID), waveState(w),
					w.Used.Tokens, w.Reserved.Tokens, capText(float64(w.TokensCap), false),
					money(w.Used.Dollars), money(w.Reserved.Dollars), capText(w.DollarsCap, true), w.Running, len(w.Waiting))
			}
			return tw.Flush()
		},
	}
	addNoHeaders(list, g)
	cmd.AddCommand(set, show, list, closeCmd)
	return cmd
}

// checkWaveArg refuses a wave id no capsule could name, before asking sagad.
func checkWaveArg(id string) error {
	if !budget.ValidWaveID(id) {
		return exit(ExitUsage, fmt.Errorf("wave %q: want 1 to 64 of [A-Za-z0-9_-] (the capsule's wave_id)", printable(id)))
	}
	return nil
}

func waveState(w admin.WaveInfo) string {
	if w.Closed {
		return "closed"
	}
	return "open"
}

// money shows a dollar amount to the micro-dollar: sums of float charges
// carry binary residue (0.1 + 0.2) that is no information.
func money(d float64) string { return strconv.FormatFloat(math.Round(d*1e6)/1e6, 'f', -1, 64) }

// capText is a cap as shown: "none" for 0.
func capText(v float64, dollars bool) string {
	switch {
	case v == 0:
		return "none"
	case dollars:
		return money(v)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

// printWave prints one wave: -o json/yaml its admin.WaveInfo, else a
// key: value block.
func printWave(cmd *cobra.Command, g *globals, w admin.WaveInfo) error {
	out := cmd.OutOrStdout()
	if enc := g.encoder(); enc != nil {
		return enc(out, w)
	}
	tw := table(out)
	fmt.Fprintf(tw, "wave:\t%s\n", printable(w.WaveID))
	if w.Composition != "" {
		fmt.Fprintf(tw, "composition:\t%s\n", printable(w.Composition))
	}
	fmt.Fprintf(tw, "state:\t%s\n", waveState(w))
	left := func(p *int64) string {
		if p == nil {
			return "unlimited"
		}
		return strconv.FormatInt(*p, 10)
	}
	fmt.Fprintf(tw, "tokens:\tcap %s, used %d, reserved %d, left %s\n", capText(float64(w.TokensCap), false), w.Used.Tokens, w.Reserved.Tokens, left(w.TokensLeft))
	dleft := "unlimited"
	if w.DollarsLeft != nil {
		dleft = money(*w.DollarsLeft)
	}
	fmt.Fprintf(tw, "dollars:\tcap %s, used %s, reserved %s, left %s\n", capText(w.DollarsCap, true), money(w.Used.Dollars), money(w.Reserved.Dollars), dleft)
	fmt.Fprintf(tw, "running:\t%d\n", w.Running)
	admits := "any producer"
	if len(w.Producers) > 0 {
		admits = strings.Join(printables(w.Producers), ", ")
	}
	fmt.Fprintf(tw, "admits:\t%s\n", admits)
	names := make([]string, 0, len(w.Holders))
	for p := range w.Holders {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		h := w.Holders[p]
		fmt.Fprintf(tw, "held by %s:\t%d capsules, %d tokens, %s dollars reserved\n", printable(p), h.Capsules, h.Reserved.Tokens, money(h.Reserved.Dollars))
	}
	waiting := "-"
	if len(w.Waiting) > 0 {
		waiting = strings.Join(printables(w.Waiting), ", ")
	}
	fmt.Fprintf(tw, "waiting:\t%s\n", waiting)
	return tw.Flush()
}

// named is a wave as a person knows it: a composition's budget wave by
// the composition's name, its id beside it ("fan-out (composition-<uuid>)");
// any other wave by its id. -o json keeps the two apart.
func named(name, waveID string) string {
	if name == "" {
		return printable(waveID)
	}
	return printable(name) + " (" + printable(waveID) + ")"
}
