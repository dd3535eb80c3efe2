package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/store"
)

func contextWithTimeout(cmd *cobra.Command, g *globals) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), g.timeout)
}

func notFound(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return exit(ExitNotFound, err)
	}
	return err
}

func newStatus(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status ID",
		Short: "Show a capsule's state, phase, cycles, halt reason and history",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, a, done, err := g.dialAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			s, err := a.Status(ctx, args[0])
			if err != nil {
				return readErr(err)
			}
			if enc := g.encoder(); enc != nil {
				return enc(cmd.OutOrStdout(), s)
			}
			return printStatus(cmd.OutOrStdout(), s)
		},
	}
}

func newWait(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait ID [--timeout D]",
		Short: "Block until the capsule ends or needs a human; exit 0 only if it completed",
		Long: `Block until the capsule ends or needs a human, print its status and exit with:
0 completed, 1 halted, 3 paused or waiting_for_operator (a human must act),
20 cancelled, 21 still running at --timeout, 4 no such capsule (after --timeout).

A capsule paused while an executor works on accepted work (trigger
blocked_external, a result awaited) is still running: wait keeps waiting.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return waitFor(cmd, g, args[0], timeout)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "give up after this long")
	return cmd
}

// waitFor is `sagactl wait ID`: it waits for the capsule to end or need a
// human, prints its status and returns the exit wait documents.
func waitFor(cmd *cobra.Command, g *globals, id string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	nc, err := g.dialNATS()
	if err != nil {
		return err
	}
	defer nc.Close()
	a := adminsvc.NewClient(nc, adminsvc.ClientConfig{})
	s, err := waitSettled(ctx, a, id)
	if errors.Is(err, context.DeadlineExceeded) {
		sctx, scancel := contextWithTimeout(cmd, g)
		defer scancel()
		if cur, serr := a.Status(sctx, id); serr == nil {
			_ = render(cmd, g, cur)
			still := pf(cur.State)
			if cur.AwaitingExternal {
				still += ", awaiting the result of accepted external work"
			}
			return exit(ExitTimeout, fmt.Errorf("timed out after %s: capsule still %s", timeout, still))
		}
		return exit(ExitNotFound, fmt.Errorf("timed out after %s: capsule %s not found", timeout, id))
	}
	if err != nil {
		return readErr(err)
	}
	if err := render(cmd, g, s); err != nil {
		return err
	}
	switch s.State {
	case capsule.Completed:
		return nil
	case capsule.Halted:
		return exit(ExitFailure, nil)
	case capsule.Cancelled:
		return exit(ExitCancelled, nil)
	default:
		return exit(ExitHuman, nil)
	}
}

// waitPoll is how long one wait request asks sagad to wait; a wait of
// longer asks again, each answer under --request-timeout's margin.
const waitPoll = 20 * time.Second

// waitSettled asks sagad, one bounded wait after another, until the
// capsule ends or needs a person, or ctx ends (context.DeadlineExceeded).
func waitSettled(ctx context.Context, a *adminsvc.Client, id string) (client.Status, error) {
	for {
		d := waitPoll
		if dl, ok := ctx.Deadline(); ok {
			d = min(d, time.Until(dl))
		}
		if d <= 0 {
			return client.Status{}, context.DeadlineExceeded
		}
		r, err := a.Wait(ctx, id, d)
		if err != nil {
			if ctx.Err() != nil {
				return client.Status{}, ctx.Err()
			}
			return client.Status{}, err
		}
		if r.Status != nil && r.Settled {
			return *r.Status, nil
		}
		if ctx.Err() != nil {
			return client.Status{}, ctx.Err()
		}
	}
}

func render(cmd *cobra.Command, g *globals, s client.Status) error {
	if enc := g.encoder(); enc != nil {
		return enc(cmd.OutOrStdout(), s)
	}
	return printStatus(cmd.OutOrStdout(), s)
}

// DefaultListLimit is `sagactl list`'s default --limit.
const DefaultListLimit = 100

// listWidth is what the default `sagactl list` table fits in: the reason
// column is cut to it, every other column is at most as wide as its
// longest possible value (a UUID, waiting_for_operator, 4 AUTOMATED_GATES).
const listWidth = 120

// newestFirst sorts list by update time, newest first (then by capsule id,
// for a stable order), and keeps the first limit of them (0: all).
func newestFirst(list []client.Status, limit int) []client.Status {
	slices.SortStableFunc(list, func(a, b client.Status) int {
		if c := b.UpdatedAt.Compare(a.UpdatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.CapsuleID, b.CapsuleID)
	})
	if limit > 0 && len(list) > limit {
		list = list[:limit]
	}
	return list
}

// age is how long ago t was, to the second and in at most two units (3d4h,
// 5m30s), as kubectl shows it.
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t).Truncate(time.Second)
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return d.String()
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// cut shortens s to at most n runes, marking the cut with "…".
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// printList writes the list table: the columns that fit [listWidth], or
// every column and the whole reason when wide.
func printList(tw *tabwriter.Writer, list []client.Status, wide bool, now time.Time) error {
	if wide {
		fmt.Fprintln(tw, "CAPSULE_ID\tKEY\tSTATE\tPHASE\tCYCLES\tPROGRESS\tUPDATED_AT\tHALT_REASON")
		for _, s := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d %s\t%d\t%d%%\t%s\t%s\n", dash(s.CapsuleID), printable(s.Key), pf(s.State), s.Phase, printable(s.PhaseName),
				s.CyclesUsed, s.Progress, ts(s.UpdatedAt), dash(s.HaltReason))
		}
		return tw.Flush()
	}
	// The columns before REASON take at most 36+20+17+6+6 characters and
	// 2 of padding each: REASON gets the rest.
	const reasonWidth = listWidth - (36 + 20 + 17 + 6 + 6 + 5*2)
	fmt.Fprintln(tw, "CAPSULE_ID\tSTATE\tPHASE\tCYCLES\tAGE\tREASON")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%d %s\t%d\t%s\t%s\n", cut(idOrKey(s.CapsuleID, s.Key), 36), cut(pf(s.State), 20), s.Phase, cut(printable(s.PhaseName), 15),
			s.CyclesUsed, age(now, s.UpdatedAt), cut(dash(s.HaltReason), reasonWidth))
	}
	return tw.Flush()
}

// idOrKey is what names s in a table: its capsule id, or its key (x-N, the
// intake sequence) when the message had no id to read — the key is what
// status, history and replay take.
func idOrKey(id, key string) string {
	if id == "" && key != "" {
		return printable(key)
	}
	return dash(id)
}

func newList(g *globals) *cobra.Command {
	var f listFilters
	var limit int
	var watch bool
	cmd := &cobra.Command{
		Use:   "list [--state S] [--wave W] [--kind K] [--halt-reason R] [--composition C] [--producer P] [--since T] [--limit N] [--watch]",
		Short: "List capsules, newest first, optionally only those the filters select",
		Long: `List capsules, most recently updated first: the newest --limit N (default 100,
0 lists all). The table fits 120 columns (AGE is since the last update; a long
halt reason is cut with "…"); -o wide adds the key, progress and update time
and shows the whole halt reason; -o json and -o yaml give the full records.
The filters (--state, --wave, --kind, --halt-reason as a prefix,
--composition ID or ID#RUN, --producer, --since) keep the capsules that
match every one given; sagactl bulk selects with the same filters.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := f.request()
			if err != nil {
				return err
			}
			if limit < 0 {
				return exit(ExitUsage, fmt.Errorf("--limit %d: want 0 (all) or more", limit))
			}
			ctx, a, done, err := g.dialAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			if watch {
				w := &listWatch{g: g, admin: a, req: req, limit: limit, every: listWatchInterval}
				return w.run(cmd.Context(), cmd)
			}
			list, total, err := listPages(ctx, a, req, limit)
			if err != nil {
				return readErr(err)
			}
			list = newestFirst(list, limit)
			out := cmd.OutOrStdout()
			if enc := g.encoder(); enc != nil {
				return enc(out, list)
			}
			if err := printList(g.listTable(out), list, g.output == outputWide, time.Now()); err != nil {
				return err
			}
			if len(list) < total {
				fmt.Fprintf(cmd.ErrOrStderr(), "sagactl: showing the newest %d of %d capsules (--limit 0 for all)\n", len(list), total)
			}
			return nil
		},
	}
	f.bind(cmd.Flags())
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "after the list, print each capsule whose row changes, as it changes, until Ctrl-C")
	addNoHeaders(cmd, g)
	cmd.Flags().IntVar(&limit, "limit", DefaultListLimit, "list at most this many, newest first (0: all)")
	return cmd
}

// listPages reads the newest limit capsules (0: all) page by page, and
// how many there are in all.
func listPages(ctx context.Context, a *adminsvc.Client, r adminsvc.ListRequest, limit int) ([]client.Status, int, error) {
	list := []client.Status{}
	total := 0
	for {
		r.Limit = 1000
		if limit > 0 {
			r.Limit = min(1000, limit-len(list))
		}
		p, err := a.List(ctx, r)
		if err != nil {
			return nil, 0, err
		}
		if r.Cursor == "" {
			total = p.Total
		}
		list = append(list, p.Items...)
		if p.NextCursor == "" || len(p.Items) == 0 || (limit > 0 && len(list) >= limit) {
			return list, max(total, len(list)), nil
		}
		r.Cursor = p.NextCursor
	}
}

func newHistory(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "history ID",
		Short: "Show a capsule's lifecycle events, oldest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, a, done, err := g.dialAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			events, err := a.AllHistory(ctx, args[0])
			if err != nil {
				return readErr(err)
			}
			if len(events) == 0 {
				return exit(ExitNotFound, fmt.Errorf("%w: no events for %s", store.ErrNotFound, args[0]))
			}
			out := cmd.OutOrStdout()
			if enc := g.encoder(); enc != nil {
				return enc(out, events)
			}
			tw := g.listTable(out)
			fmt.Fprintln(tw, "AT\tEVENT\tPHASE\tCYCLE\tDETAIL")
			for _, e := range events {
				detail := saidDetail(e)
				if e.By != "" {
					detail += " (by " + e.By + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d %s\t%d\t%s\n", ts(e.At), pf(e.Kind), e.Phase, printable(e.PhaseName), e.Cycle, dash(detail))
			}
			return tw.Flush()
		},
	}
	addNoHeaders(cmd, g)
	return cmd
}
