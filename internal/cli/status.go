package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/store"
)

func contextWithTimeout(cmd *cobra.Command, g *globals) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), g.timeout)
}

// dial connects for one command, under the request timeout; done closes the
// connection and the context.
func (g *globals) dial(cmd *cobra.Command) (context.Context, *client.Client, func(), error) {
	ctx, cancel := contextWithTimeout(cmd, g)
	client, _, closeFn, err := g.connect(ctx)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return ctx, client, func() { closeFn(); cancel() }, nil
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
			ctx, client, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			s, err := client.Status(ctx, args[0])
			if err != nil {
				return notFound(err)
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), s)
			}
			return printStatus(cmd.OutOrStdout(), s)
		},
	}
}

func newWait(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait ID [--timeout D]",
		Short: "Block until the capsule leaves in_progress; exit 0 only if it completed",
		Long: `Block until the capsule leaves in_progress, print its status and exit with:
0 completed, 1 halted, 3 paused or waiting_for_operator, 20 cancelled,
21 still in progress at --timeout, 4 no such capsule (after --timeout).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			client, _, closeFn, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer closeFn()
			s, err := client.Wait(ctx, args[0])
			if errors.Is(err, context.DeadlineExceeded) {
				if cur, serr := client.Status(cmd.Context(), args[0]); serr == nil {
					_ = render(cmd, g, cur)
					return exit(ExitTimeout, fmt.Errorf("timed out after %s: capsule still %s", timeout, pf(cur.State)))
				}
				return exit(ExitNotFound, fmt.Errorf("timed out after %s: capsule %s not found", timeout, args[0]))
			}
			if err != nil {
				return notFound(err)
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
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "give up after this long")
	return cmd
}

func render(cmd *cobra.Command, g *globals, s client.Status) error {
	if g.json() {
		return writeJSON(cmd.OutOrStdout(), s)
	}
	return printStatus(cmd.OutOrStdout(), s)
}

func newList(g *globals) *cobra.Command {
	var state string
	cmd := &cobra.Command{
		Use:   "list [--state S]",
		Short: "List capsules, optionally only those in one state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st := capsule.State(state)
			if state != "" && !st.Valid() {
				return exit(ExitUsage, fmt.Errorf("--state %q: want one of in_progress, paused, waiting_for_operator, completed, halted, cancelled", state))
			}
			ctx, client, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			list, err := client.List(ctx, st)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.json() {
				return writeJSON(out, list)
			}
			tw := table(out)
			fmt.Fprintln(tw, "CAPSULE_ID\tKEY\tSTATE\tPHASE\tCYCLES\tHALT_REASON\tUPDATED_AT")
			for _, s := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d %s\t%d\t%s\t%s\n", dash(s.CapsuleID), printable(s.Key), pf(s.State), s.Phase, printable(s.PhaseName), s.CyclesUsed, dash(s.HaltReason), ts(s.UpdatedAt))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "only capsules in this state")
	return cmd
}

func newHistory(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "history ID",
		Short: "Show a capsule's lifecycle events, oldest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, client, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			events, err := client.History(ctx, args[0])
			if err != nil {
				return notFound(err)
			}
			if len(events) == 0 {
				return exit(ExitNotFound, fmt.Errorf("%w: no events for %s", store.ErrNotFound, args[0]))
			}
			out := cmd.OutOrStdout()
			if g.json() {
				return writeJSON(out, events)
			}
			tw := table(out)
			fmt.Fprintln(tw, "AT\tEVENT\tPHASE\tCYCLE\tDETAIL")
			for _, e := range events {
				detail := e.Detail
				if e.By != "" {
					detail += " (by " + e.By + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d %s\t%d\t%s\n", ts(e.At), pf(e.Kind), e.Phase, printable(e.PhaseName), e.Cycle, dash(detail))
			}
			return tw.Flush()
		},
	}
}
