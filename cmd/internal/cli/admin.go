package cli

import (
	"context"
	"errors"
	"fmt"
	"github.com/sagad/sagad/compose"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/store"
)

// ExitRefused: the capsule's state does not allow the action; nothing changed.
const ExitRefused = 5

// ExitNoSagad: no sagad answered an admin command (none running, or none
// within --request-timeout).
const ExitNoSagad = 6

// operator names who acts, for the event stream: --by, else $SAGA_OPERATOR,
// else the login name.
func operator(by string) string {
	if by != "" {
		return by
	}
	if v := os.Getenv("SAGA_OPERATOR"); v != "" {
		return v
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "operator"
}

// dialAdmin connects for one admin command, under the request timeout, and
// returns a client of sagad's admin service; done closes the connection
// and the context. Admin commands change nothing themselves: a running
// sagad carries them out (and counts them in its metrics).
func (g *globals) dialAdmin(cmd *cobra.Command) (context.Context, *adminsvc.Client, func(), error) {
	ctx, cancel := contextWithTimeout(cmd, g)
	nc, err := g.dialNATS()
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return ctx, adminsvc.NewClient(nc, adminsvc.ClientConfig{}), func() { nc.Close(); cancel() }, nil
}

// adminErr maps admin errors to exit codes.
func adminErr(err error) error {
	switch {
	case errors.Is(err, adminsvc.ErrNoSagad):
		return exit(ExitNoSagad, err)
	case errors.Is(err, admin.ErrRefused):
		return exit(ExitRefused, err)
	case errors.Is(err, store.ErrNotFound):
		return exit(ExitNotFound, err)
	case errors.Is(err, adminsvc.ErrBadRequest):
		return exit(ExitUsage, err)
	}
	return err
}

// readErr maps the errors of a read command to exit codes: a read finding
// no sagad is the failure it was when reads went to JetStream directly
// (exit 1), a missing capsule exit 4.
func readErr(err error) error {
	var ns *adminsvc.NoSagadError
	switch {
	case errors.As(err, &ns) && ns.Waited == 0:
		return exit(ExitFailure, &noSagadRead{ns})
	case errors.Is(err, adminsvc.ErrNoSagad):
		return exit(ExitFailure, err)
	case errors.Is(err, store.ErrNotFound):
		return exit(ExitNotFound, err)
	case errors.Is(err, adminsvc.ErrBadRequest):
		return exit(ExitUsage, err)
	}
	return err
}

// adminCommand builds `sagactl <use>` running act and printing the status.
func adminCommand(g *globals, use, short, long string, flags func(*cobra.Command), act func(ctx context.Context, a *adminsvc.Client, id string) (client.Status, error)) *cobra.Command {
	cmd := &cobra.Command{
		Use: use, Short: short, Long: long, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, a, done, err := g.dialAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			s, err := act(ctx, a, args[0])
			if err != nil {
				return adminErr(err)
			}
			return render(cmd, g, s)
		},
	}
	if flags != nil {
		flags(cmd)
	}
	return cmd
}

func newPause(g *globals) *cobra.Command {
	var reason, by string
	var all bool
	cmd := adminCommand(g, "pause ID|--all [--reason R]", "Pause a capsule (operator_manual), or with --all stop everything",
		`Pause a capsule with the operator_manual trigger. A queued capsule parks at
once; one inside a phase finishes that phase's step, then parks at the next
phase. Pausing a paused capsule changes nothing. Exit 5 if the capsule has
ended or waits for an operator decision.

--all stops everything at once instead: every phase is paused for every sagad
(phase pause 0 to 6, intake first so nothing new enters); capsules stay where
they are, in-flight steps finish, queued messages wait. resume --all undoes it.`,
		func(c *cobra.Command) {
			c.Flags().StringVar(&reason, "reason", "", "why (recorded in the event stream; with --all, kept with --by on each paused phase: pending and phase list show it)")
			c.Flags().StringVar(&by, "by", "", "who (default $SAGA_OPERATOR or the login name)")
			c.Flags().BoolVar(&all, "all", false, "pause every phase: stop all work")
		},
		func(ctx context.Context, a *adminsvc.Client, id string) (client.Status, error) {
			return a.Pause(ctx, adminsvc.PauseRequest{ID: id, Reason: reason, By: operator(by)})
		})
	withAll(g, cmd, &all, true, func() adminsvc.PhaseRequest { return adminsvc.PhaseRequest{By: operator(by), Reason: reason} })
	return cmd
}

// withAll lets cmd (pause or resume) take --all instead of an ID: every
// phase paused (in phase order, so the intake stops first) or resumed (in
// reverse, so downstream phases drain before upstream ones feed them),
// through the admin service's phase.pause and phase.resume. The phases
// are printed as `phase list` prints them.
func withAll(g *globals, cmd *cobra.Command, all *bool, pause bool, req func() adminsvc.PhaseRequest) {
	one := cmd.RunE
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if *all {
			if len(args) > 0 {
				return exit(ExitUsage, errors.New("--all takes no capsule id"))
			}
			return nil
		}
		return cobra.ExactArgs(1)(cmd, args)
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if !*all {
			return one(cmd, args)
		}
		var only []string
		for _, name := range []string{"tokens", "dollars", "deadline", "extend", "force"} {
			if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
				only = append(only, "--"+name)
			}
		}
		if len(only) > 0 {
			return exit(ExitUsage, fmt.Errorf("%s apply to one capsule, not --all", strings.Join(only, ", ")))
		}
		ctx, a, done, err := g.dialAdmin(cmd)
		if err != nil {
			return err
		}
		defer done()
		r := req()
		var list []admin.PhaseState
		for i := range int(capsule.NumPhases) {
			ph := i
			if !pause {
				ph = int(capsule.NumPhases) - 1 - i
			}
			r.Phase = ph
			if pause {
				list, err = a.PausePhase(ctx, r)
			} else {
				list, err = a.ResumePhase(ctx, r)
			}
			if err != nil {
				return adminErr(fmt.Errorf("phase %s: %w", capsule.Phase(ph), err))
			}
		}
		return printPhases(cmd, g, list)
	}
}

func newResume(g *globals) *cobra.Command {
	var reason, by, deadline string
	var tokens int64
	var dollars float64
	var extend time.Duration
	var force bool
	var all bool
	var answer string
	cmd := adminCommand(g, "resume ID|--all [--tokens N] [--dollars X] [--deadline T | --extend D] [--answer TEXT]",
		"Resume a paused capsule where it stopped, optionally lifting the cause; --all restarts every phase",
		`Resume a paused capsule exactly where it stopped: the phase it was at runs
(again, if it had parked before finishing); completed phases and recorded
executor results are never re-run. --tokens/--dollars raise the capsule's caps
(after budget_warning); --deadline (RFC 3339) or --extend moves its deadline
(after deadline_approaching); past its deadline a resume without either is
refused (exit 5). --answer gives the executor a person's answer (an
escalation's resolution): recorded with --by, the next executor call carries
it as operator_answer (SAGA_OPERATOR_ANSWER for a command). Exit 5 if the
capsule is not paused.

A capsule paused with agent_query (its agent asked a question during its
call, which goes on meanwhile) takes --answer only: the answer goes to the
agent at once, is recorded with --by (history: agent_query_answered), and
once no question is open the capsule runs again. sagactl pending shows the
question.

--all restarts every phase paused by pause --all or phase pause (the last
phase first); capsules paused one by one stay paused.`,
		func(c *cobra.Command) {
			c.Flags().StringVar(&reason, "reason", "", "why (recorded in the event stream)")
			c.Flags().StringVar(&by, "by", "", "who (default $SAGA_OPERATOR or the login name)")
			c.Flags().Int64Var(&tokens, "tokens", 0, "raise the token cap to N")
			c.Flags().Float64Var(&dollars, "dollars", 0, "raise the dollar cap to X")
			c.Flags().StringVar(&deadline, "deadline", "", "new deadline (RFC 3339)")
			c.Flags().DurationVar(&extend, "extend", 0, "move the deadline to now + D")
			c.Flags().BoolVar(&force, "force", false, "resume a capsule still waiting for accepted external work (runs its executor again)")
			c.Flags().BoolVar(&all, "all", false, "resume every phase: restart all work")
			c.Flags().StringVar(&answer, "answer", "", "a person's answer for the executor's next call (operator_answer)")
		},
		func(ctx context.Context, a *adminsvc.Client, id string) (client.Status, error) {
			opts := adminsvc.ResumeRequest{ID: id, By: operator(by), Reason: reason, Tokens: tokens, Dollars: dollars, Force: force, Answer: answer}
			switch {
			case deadline != "" && extend != 0:
				return client.Status{}, exit(ExitUsage, errors.New("--deadline and --extend exclude each other"))
			case deadline != "":
				t, err := time.Parse(time.RFC3339, deadline)
				if err != nil {
					return client.Status{}, exit(ExitUsage, fmt.Errorf("--deadline: %w", err))
				}
				opts.Deadline = &t
			case extend > 0:
				// sagad's clock reads it: the operator's may be off.
				opts.Extend = extend.String()
			}
			return a.Resume(ctx, opts)
		})
	withAll(g, cmd, &all, false, func() adminsvc.PhaseRequest { return adminsvc.PhaseRequest{By: operator(by), Reason: reason} })
	return cmd
}

func newCancel(g *globals) *cobra.Command {
	var reason, by string
	return adminCommand(g, "cancel ID [--reason R]", "Cancel a capsule: it ends cancelled and its locks are released",
		`Cancel a capsule from any state but completed or halted (exit 5 then). It
ends cancelled where it stands, its locks are released and it is emitted on
the outcome subject. Cancelling a cancelled capsule changes nothing.`,
		func(c *cobra.Command) {
			c.Flags().StringVar(&reason, "reason", "", "why (recorded in the history and event stream)")
			c.Flags().StringVar(&by, "by", "", "who (default $SAGA_OPERATOR or the login name)")
		},
		func(ctx context.Context, a *adminsvc.Client, id string) (client.Status, error) {
			return a.Cancel(ctx, adminsvc.CancelRequest{ID: id, Reason: reason, By: operator(by)})
		})
}

func newDecide(g *globals) *cobra.Command {
	var rationale, by string
	cmd := &cobra.Command{
		Use:   "decide ID accept|revise|reject [--rationale R]",
		Short: "Decide a capsule waiting_for_operator: accept (to HANDOFF), revise (back to EXECUTION) or reject (halt)",
		Long: `Settle the operator gate of a capsule waiting_for_operator. accept goes on to
HANDOFF; revise sends it back to EXECUTION as a new cycle with the rationale as
review findings (Rule 12 applies: after the last cycle it halts with
max_cycles_exceeded); reject halts it with operator_rejected. With
review.operator_gate "all" every verdict waits here (sagactl pending shows it).
Exit 5, changing nothing, if the capsule is not waiting.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			decision := strings.ToLower(args[1])
			if decision != admin.DecisionAccept && decision != admin.DecisionRevise && decision != admin.DecisionReject {
				return exit(ExitUsage, fmt.Errorf("decision %q: want accept, revise or reject", args[1]))
			}
			if decision == admin.DecisionRevise && strings.TrimSpace(rationale) == "" {
				return exit(ExitUsage, errors.New("revise needs --rationale: the executor gets it as the review's findings"))
			}
			ctx, a, done, err := g.dialAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			s, err := a.Decide(ctx, adminsvc.DecideRequest{ID: args[0], Decision: decision, Rationale: rationale, By: operator(by)})
			if err != nil {
				return adminErr(err)
			}
			return render(cmd, g, s)
		},
	}
	cmd.Flags().StringVar(&rationale, "rationale", "", "why (required for revise)")
	cmd.Flags().StringVar(&by, "by", "", "who (default $SAGA_OPERATOR or the login name)")
	return cmd
}

func newPending(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pending",
		Short: "List what waits for a human: paused phases, operator decisions and paused capsules only a person can resume",
		Long: `List what waits for a human. First the phases paused for every sagad
(sagactl phase pause, pause --all), each with who paused it, when, why and
how many messages wait in it (queued, and in flight when it was paused);
nothing in a paused phase moves until someone resumes it. Then the capsules
waiting for an operator decision and those paused that only a person can
resume, oldest first, and the composition loops that stopped for no
progress.

-o json prints the capsules only (a list); the paused phases are in
sagactl phase list -o json (paused_by, paused_at, pause_reason).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, a, done, err := g.dialAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			reply, err := a.PendingAll(ctx)
			if err != nil {
				return adminErr(err)
			}
			items := reply.Items
			out := cmd.OutOrStdout()
			if enc := g.encoder(); enc != nil {
				if items == nil {
					items = []admin.PendingItem{}
				}
				return enc(out, items)
			}
			if err := printPausedPhases(out, reply.Phases); err != nil {
				return err
			}
			tw := g.listTable(out)
			fmt.Fprintln(tw, "CAPSULE_ID\tSTATE\tTRIGGER\tPHASE\tCYCLE\tAGE\tVERDICT\tREASON")
			for _, it := range items {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d %s\t%d\t%s\t%s\t%s\n", idOrKey(it.CapsuleID, it.Key), pf(it.State), pf(it.Trigger), it.Phase, printable(it.PhaseName),
					it.Cycle, (time.Duration(it.AgeSecs) * time.Second).String(), dash(string(it.Verdict)), dash(it.Reason))
				for _, f := range it.Findings {
					fmt.Fprintf(tw, "\t\t\t\t\t\t\t- %s\n", printable(f.Message))
				}
				if q := it.Query; q != nil {
					more := ""
					if q.Open > 1 {
						more = fmt.Sprintf(" (%d questions open, the oldest first)", q.Open)
					}
					fmt.Fprintf(tw, "\t\t\t\t\t\t\t- %s asks (query %s, %s ago)%s: %s — answer: sagactl resume %s --answer TEXT\n",
						dash(printable(q.Agent)), printable(q.ID), (time.Duration(q.AgeSecs) * time.Second).String(), more,
						printable(q.Prompt), idOrKey(it.CapsuleID, it.Key))
				}
			}
			// A composition's loop that stopped for no progress waits for
			// a decision on its verifier (the -o json list is the capsules').
			for _, w := range reply.Compositions {
				counts := make([]string, len(w.Findings))
				for i, n := range w.Findings {
					counts[i] = fmt.Sprint(n)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t%s\t-\tcomposition %s run %d: loop of %s made no progress (findings %s): sagactl composition decide %s %s accept|reject\n",
					w.CapsuleID, compose.StatePaused, compose.ReasonNoProgress, time.Since(w.Since).Truncate(time.Second), printable(w.CompositionID), w.Run,
					printable(w.Verifier), strings.Join(counts, " "), printable(w.CompositionID), printable(w.Verifier))
			}
			return tw.Flush()
		},
	}
	addNoHeaders(cmd, g)
	return cmd
}

func newPhase(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "phase pause|resume|list [N]",
		Short: "Stop or restart consumption of one phase for every sagad at once; list phases",
	}
	var by, reason string
	run := func(pause bool) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			ph, err := capsule.ParsePhase(args[0])
			if err != nil {
				return exit(ExitUsage, err)
			}
			ctx, a, done, err := g.dialAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			req := adminsvc.PhaseRequest{Phase: int(ph), By: operator(by), Reason: reason}
			var list []admin.PhaseState
			if pause {
				list, err = a.PausePhase(ctx, req)
			} else {
				list, err = a.ResumePhase(ctx, req)
			}
			if err != nil {
				return adminErr(err)
			}
			return printPhases(cmd, g, list)
		}
	}
	pauseCmd := &cobra.Command{Use: "pause N", Short: "Stop every sagad consuming phase N (number or name); what is queued stays", Args: cobra.ExactArgs(1), RunE: run(true)}
	resumeCmd := &cobra.Command{Use: "resume N", Short: "Let every sagad consume phase N again", Args: cobra.ExactArgs(1), RunE: run(false)}
	for _, c := range []*cobra.Command{pauseCmd, resumeCmd} {
		c.Flags().StringVar(&by, "by", "", "who (logged by sagad; default $SAGA_OPERATOR or the login name)")
	}
	pauseCmd.Flags().StringVar(&reason, "reason", "", "why (kept with --by and the time until the phase resumes: sagactl pending, phase list and the console's inbox show it)")
	listCmd := &cobra.Command{Use: "list", Short: "Show each phase: paused or not, queued and in-flight messages", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, a, done, err := g.dialAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			list, err := a.Phases(ctx)
			if err != nil {
				return adminErr(err)
			}
			return printPhases(cmd, g, list)
		}}
	addNoHeaders(listCmd, g)
	cmd.AddCommand(pauseCmd, resumeCmd, listCmd)
	return cmd
}

func printPhases(cmd *cobra.Command, g *globals, list []admin.PhaseState) error {
	out := cmd.OutOrStdout()
	if enc := g.encoder(); enc != nil {
		return enc(out, list)
	}
	tw := g.listTable(out)
	fmt.Fprintln(tw, "PHASE\tCONSUMER\tPAUSED\tQUEUED\tIN_FLIGHT\tPAUSED_BY\tSINCE\tREASON")
	for _, p := range list {
		since := "-"
		if p.PausedAt != nil {
			since = ts(*p.PausedAt)
		}
		fmt.Fprintf(tw, "%d %s\t%s\t%t\t%d\t%d\t%s\t%s\t%s\n", p.Phase, printable(p.PhaseName), printable(p.Consumer), p.Paused, p.Pending, p.AckPending,
			dash(p.PausedBy), since, dash(p.PauseReason))
	}
	return tw.Flush()
}

// printPausedPhases writes the paused phases ahead of `pending`'s capsules,
// nothing when none is paused: a paused phase holds every capsule in it.
func printPausedPhases(out io.Writer, list []admin.PhaseState) error {
	if len(list) == 0 {
		return nil
	}
	tw := table(out)
	fmt.Fprintln(tw, "PAUSED_PHASE\tPAUSED_BY\tSINCE\tAGE\tWAITING\tIN_FLIGHT\tREASON")
	for _, p := range list {
		since, age := "-", "-"
		if p.PausedAt != nil {
			since, age = ts(*p.PausedAt), time.Since(*p.PausedAt).Truncate(time.Second).String()
		}
		fmt.Fprintf(tw, "%d %s\t%s\t%s\t%s\t%d\t%d\t%s (sagactl phase resume %s)\n", p.Phase, printable(p.PhaseName), dash(p.PausedBy), since, age,
			p.Pending, p.AckPending, dash(p.PauseReason), printable(p.PhaseName))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(out)
	return err
}
