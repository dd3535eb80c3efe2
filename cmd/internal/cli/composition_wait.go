package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/compose"
)

// compositionPoll is how often composition wait reads the run's status.
const compositionPoll = 250 * time.Millisecond

func (f *compositionFlags) wait() *cobra.Command {
	var timeout time.Duration
	c := f.runs(&cobra.Command{
		Use:   "wait ID [--timeout D]",
		Short: "Block until a composition run ends or waits for a person; exit with the run's summary exit code",
		Long: `Block until the composition run ends or waits for a person, print its status
(-o json: the run's status as composition status prints it) and exit with:
the run's summary exit code once it ended (0 completed, 1 failed or
cancelled, 12 partial: a rejected gate or a failed step with others passed),
3 when it waits for a person (a step at its operator gate or otherwise in
sagactl pending, a loop stopped for no_progress, the run paused), 21 still
running at --timeout, 4 no such composition. On a terminal it prints a
progress line each time the run's counts change (on standard error; quiet
otherwise). The run waited for is the latest when wait starts (or --run).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.waitRun(cmd, args[0], timeout)
		},
	})
	c.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "give up after this long (exit 21)")
	return c
}

// waitRun is `composition wait`: it reads the run's status until it ends,
// waits for a person or the time is up.
func (f *compositionFlags) waitRun(cmd *cobra.Command, id string, timeout time.Duration) error {
	nc, err := f.g.dialNATS()
	if err != nil {
		return err
	}
	defer nc.Close()
	a := adminsvc.NewClient(nc, adminsvc.ClientConfig{})
	req := f.request(cmd, id)
	deadline := time.Now().Add(timeout)
	progress := isTerminalWriter(cmd.OutOrStdout())
	var last string
	for {
		ctx, cancel := contextWithTimeout(cmd, f.g)
		o, err := a.CompositionStatus(ctx, req)
		var code int
		var settled bool
		if err == nil {
			code, settled, err = waitCode(ctx, a, o)
		}
		cancel()
		if err != nil {
			return adminErr(err)
		}
		// The run found first is the one waited for, even if another
		// run of the id starts meanwhile.
		req.Run = o.Run
		if line := progressLine(o); progress && line != last {
			fmt.Fprintln(cmd.ErrOrStderr(), line)
			last = line
		}
		if settled {
			if err := f.show(cmd, o, nil); err != nil {
				return err
			}
			if code == ExitOK {
				return nil
			}
			return exit(code, nil)
		}
		if !time.Now().Before(deadline) {
			if err := f.show(cmd, o, nil); err != nil {
				return err
			}
			return exit(ExitTimeout, fmt.Errorf("timed out after %s: composition %s run %d still %s", timeout, printable(o.CompositionID), o.Run, o.State))
		}
		select {
		case <-cmd.Context().Done():
			return cmd.Context().Err()
		case <-time.After(min(compositionPoll, time.Until(deadline))):
		}
	}
}

// waitCode says whether run o is settled for composition wait, and its
// exit code then: the summary's once it ended, [ExitHuman] while it waits
// for a person. A step that may wait for a person (paused, waiting) is
// looked up in sagad's pending list, which alone knows whether a person
// or sagad resumes it.
func waitCode(ctx context.Context, a *adminsvc.Client, o compose.Outcome) (int, bool, error) {
	switch o.State {
	case compose.StateCompleted, compose.StateFailed, compose.StatePartial, compose.StateCancelled:
		return o.Summary.ExitCode, true, nil
	case compose.StatePaused:
		return ExitHuman, true, nil
	}
	var ids []string
	for _, s := range o.Steps {
		switch capsule.State(s.State) {
		case capsule.Paused, capsule.WaitingForOperator, capsule.Waiting:
			ids = append(ids, s.CapsuleID)
		}
	}
	if len(ids) == 0 {
		return 0, false, nil
	}
	p, err := a.PendingAll(ctx)
	if err != nil {
		return 0, false, err
	}
	for _, it := range p.Items {
		if slices.Contains(ids, it.CapsuleID) {
			return ExitHuman, true, nil
		}
	}
	return 0, false, nil
}

// progressLine is one line of composition wait's progress.
func progressLine(o compose.Outcome) string {
	state := o.State
	if o.Reason != "" {
		state += " (" + printable(o.Reason) + ")"
	}
	return fmt.Sprintf("composition %s run %d: %s, %d of %d passed, %d failed", printable(o.CompositionID), o.Run, state,
		o.Summary.Passed, o.Summary.Total, o.Summary.Failed)
}

// isTerminalWriter says w is a character device (a person's terminal).
func isTerminalWriter(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
