package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nuid"
	"github.com/spf13/cobra"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/store"
)

func newReplay(g *globals) *cobra.Command {
	var fromPhase, capsuleFile, reason, by string
	var dependents, dryRun bool
	cmd := &cobra.Command{
		Use:   "replay ID [--from-phase N] [--capsule FILE] [--dry-run]",
		Short: "Run a halted or cancelled capsule again, as a new run of the same id",
		Long: `Run a halted or cancelled capsule again as a new run of the same id (the
dead-letter workflow: sagactl list --state halted, fix the cause, replay).

By default the run starts at the phase where the capsule halted or was
cancelled; --from-phase N (a number 1–6 or a name) starts it at an earlier
phase. --capsule FILE runs a corrected capsule of the same id from RECEPTION:
sagad checks it as it checks an intake, and every later phase acts on it.

Status shows the run (1, 2, …); the history keeps every run's transitions;
each run emits one outcome. Budget used carries over: spend accumulates and
the caps hold across runs. Cycles number on across runs, and Rule 12 counts
the new run's own.

With --dependents (the default) the capsules halted dependency_failed:<ID>
are replayed too (transitively), each from AUTOMATED_GATES as its own run:
they wait for this one and go on when it completes.

With --dry-run nothing changes: sagad judges the run the replay would start
and answers would_halt (the halt reason the bytes would meet under the rules,
schemas, locks and budgets in force, or none), the agent calls of its first
cycle (each repeated, or the earlier run's work reused), the locks it would
take, the spend it would reserve against its wave, and the dependents it
would wake. Exit 0 whether or not it would halt (read would_halt).

Exit 5, changing nothing, if the capsule is unknown, has not ended, completed,
or the phase or the corrected capsule is refused (another id, invalid, or a
phase later than where it ended). Two replays racing make one run: the other
is refused.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// One request id per invocation: the retry below, or the same
			// request sent again, finds the run it started.
			req := adminsvc.ReplayRequest{ID: args[0], Reason: reason, By: operator(by), Dependents: &dependents, RequestID: nuid.Next()}
			if err := replayInputs(cmd, &req, fromPhase, capsuleFile); err != nil {
				return err
			}
			ctx, a, done, err := g.dialAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			if dryRun {
				p, err := a.PreviewReplay(ctx, req)
				if err != nil {
					return replayErr(err)
				}
				return renderPreview(cmd, g, p)
			}
			r, err := a.Replay(ctx, req)
			var ns *adminsvc.NoSagadError
			if errors.As(err, &ns) && ns.Waited > 0 {
				// No answer in time: sagad may have started the run. Asked
				// again with the same request id, it answers that run
				// rather than starting a second.
				rctx, cancel := contextWithTimeout(cmd, g)
				r, err = a.Replay(rctx, req)
				cancel()
			}
			if err != nil {
				return replayErr(err)
			}
			return renderReplay(cmd, g, r)
		},
	}
	cmd.Flags().StringVar(&fromPhase, "from-phase", "", "start the run at this phase (1–6 or a name), at most where the capsule ended")
	cmd.Flags().StringVar(&capsuleFile, "capsule", "", "corrected capsule of the same id (file or -), run from RECEPTION")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "change nothing: say what the replay would meet (would_halt, agent calls, locks, reserve, dependents)")
	cmd.Flags().BoolVar(&dependents, "dependents", true, "also replay the capsules halted dependency_failed on this one")
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the history and event stream)")
	cmd.Flags().StringVar(&by, "by", "", "who (default $SAGA_OPERATOR or the login name)")
	return cmd
}

// replayInputs reads --from-phase and --capsule into req.
func replayInputs(cmd *cobra.Command, req *adminsvc.ReplayRequest, fromPhase, capsuleFile string) error {
	if fromPhase != "" {
		ph, err := capsule.ParsePhase(fromPhase)
		if err != nil {
			return exit(ExitRefused, fmt.Errorf("--from-phase: %w", err))
		}
		n := int(ph)
		req.FromPhase = &n
	}
	if capsuleFile == "" {
		return nil
	}
	raw, err := readInput(cmd, capsuleFile)
	if err != nil {
		return err
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' || !json.Valid(t) {
		return exit(ExitRefused, fmt.Errorf("--capsule %s: not a JSON object", capsuleFile))
	}
	if req.FromPhase != nil && *req.FromPhase != int(capsule.Reception) {
		return exit(ExitRefused, errors.New("--capsule runs the corrected capsule from RECEPTION: drop --from-phase"))
	}
	req.FromPhase = nil
	req.Capsule = raw
	return nil
}

// replayErr maps a replay's errors to exit codes: every refusal — the
// capsule's state, an unknown id, a bad phase or capsule — is exit 5.
func replayErr(err error) error {
	switch {
	case errors.Is(err, admin.ErrRefused), errors.Is(err, store.ErrNotFound), errors.Is(err, adminsvc.ErrBadRequest):
		return exit(ExitRefused, err)
	}
	return adminErr(err)
}

func renderReplay(cmd *cobra.Command, g *globals, r adminsvc.ReplayReply) error {
	if enc := g.encoder(); enc != nil {
		return enc(cmd.OutOrStdout(), r)
	}
	w := cmd.OutOrStdout()
	if err := printStatus(w, r.Capsule); err != nil {
		return err
	}
	if len(r.Dependents) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\ndependents replayed:")
	tw := table(w)
	fmt.Fprintln(tw, "  CAPSULE\tRUN\tSTATE\tERROR")
	for _, d := range r.Dependents {
		run := "-"
		if d.Run > 0 {
			run = fmt.Sprint(d.Run)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", printable(d.CapsuleID), run, dash(string(d.State)), dash(d.Error))
	}
	return tw.Flush()
}
