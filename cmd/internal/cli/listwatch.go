package cli

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/client"
)

// listWatchInterval is how often list --watch asks sagad for the list: a
// person watching sees a change within it, and one list request a second
// is nothing to sagad.
const listWatchInterval = time.Second

// listWatch is `sagactl list --watch`: the list once, as list prints it,
// then each capsule whose row changed (state, phase, cycle, halt reason)
// or that appeared, as a row of its own, as kubectl get --watch does; until
// Ctrl-C or SIGTERM, which end it with exit 0. A request that fails is
// said on stderr and tried again at the next tick: a sagad restarting does
// not end the watch.
type listWatch struct {
	g     *globals
	admin *adminsvc.Client
	req   adminsvc.ListRequest
	limit int
	// every is the interval between requests (listWatchInterval).
	every time.Duration
	seen  map[string]client.Status
}

// run prints until ctx ends.
func (w *listWatch) run(ctx context.Context, cmd *cobra.Command) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := cmd.OutOrStdout()
	first := true
	tick := time.NewTicker(w.every)
	defer tick.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, w.g.timeout)
		list, _, err := listPages(rctx, w.admin, w.req, w.limit)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			printError(cmd.ErrOrStderr(), readErr(err))
		default:
			changed := w.changed(newestFirst(list, w.limit))
			if first || len(changed) > 0 {
				if err := w.print(out, changed, first); err != nil {
					return err
				}
				first = false
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// changed returns the capsules of list whose row differs from the one
// printed last, oldest update first, and remembers them.
func (w *listWatch) changed(list []client.Status) []client.Status {
	if w.seen == nil {
		w.seen = map[string]client.Status{}
	}
	var out []client.Status
	for i := len(list) - 1; i >= 0; i-- {
		s := list[i]
		if old, ok := w.seen[s.Key]; ok && sameRow(old, s) {
			continue
		}
		w.seen[s.Key] = s
		out = append(out, s)
	}
	return out
}

// sameRow reports whether a and b print the same row (but for its age).
func sameRow(a, b client.Status) bool {
	return a.State == b.State && a.Phase == b.Phase && a.CyclesUsed == b.CyclesUsed && a.HaltReason == b.HaltReason &&
		a.Progress == b.Progress
}

// print writes the rows: the first time with list's header (unless
// --no-headers), later without; -o json/yaml/jsonpath one document each.
func (w *listWatch) print(out io.Writer, rows []client.Status, first bool) error {
	if enc := w.g.encoder(); enc != nil {
		for _, s := range rows {
			if err := enc(out, s); err != nil {
				return err
			}
		}
		return nil
	}
	tw := table(&skipFirstLine{w: out})
	if first {
		tw = w.g.listTable(out)
	}
	return printList(tw, rows, w.g.output == outputWide, time.Now())
}
