package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/store"
)

// watchCmd is `sagactl watch`: it follows the lifecycle events live,
// through sagad's admin service (saga.admin.events, a long poll).
type watchCmd struct {
	admin *adminsvc.Client
	// key is one capsule's key (its capsule_id); empty follows every capsule.
	key string
	// since replays the events of that long ago first; 0 starts with the
	// next event published.
	since time.Duration
	// count stops after that many events; 0 follows until ctx ends.
	count int
	// output is -o: json writes one JSON object per line, yaml one YAML
	// document per event ("---" between), anything else one text line.
	output string
	now    func() time.Time
}

// watchSeenLimit bounds the event ids remembered for de-duplication. JetStream
// already drops re-emitted events inside its duplicate window; this catches
// the rare one re-emitted later without growing forever.
const watchSeenLimit = 4096

// watchReplayLimit bounds the events a --since replay holds back to sort:
// past it, they are printed in time order as far as held, and the rest of
// the replay after them.
const watchReplayLimit = 100_000

// watchPoll is how long one events request asks sagad to wait for news.
const watchPoll = 20 * time.Second

// Run prints each event as it arrives until ctx ends or count is reached.
// It returns nil when ctx is cancelled (Ctrl-C), and an ExitTimeout error
// when ctx's deadline passes before count events arrived.
//
// A transition's events are derived from the checkpoint revision that
// records it; pauses, operator actions and duplicates are on the events
// stream. sagad reads both and answers each request with what is new after
// the request's cursor; the consumers it reads with are its own, and gone
// when it has answered.
func (w *watchCmd) Run(ctx context.Context, out io.Writer) error {
	start := w.now()
	// A transition is stamped a moment before its checkpoint revision is
	// stored: without --since, transitions stamped this much before the
	// watch began still show when their revision arrives after it.
	from := start.Add(-watchSlack)
	if w.since > 0 {
		start = start.Add(-w.since)
		from = start
	}
	req := adminsvc.EventsRequest{ID: w.key, Since: &start, From: &from}
	if w.output != outputJSON && w.output != outputYAML {
		fmt.Fprintf(out, "%-24s  %-36s  %-20s  %-18s  %-5s  %s\n", "AT", "CAPSULE", "EVENT", "PHASE", "CYCLE", "DETAIL")
	}
	enc := json.NewEncoder(out)
	seen := make(map[string]bool)
	var order []string
	printed := newPrintedHistory()
	n := 0
	full := func() bool { return w.count != 0 && n >= w.count }
	emit := func(evs []capsule.Event) error {
		for _, ev := range evs {
			if full() {
				return nil
			}
			if ev.ID != "" {
				if seen[ev.ID] {
					continue
				}
				seen[ev.ID] = true
				if order = append(order, ev.ID); len(order) > watchSeenLimit {
					delete(seen, order[0])
					order = order[1:]
				}
			}
			if err := w.print(out, enc, ev, n); err != nil {
				return err
			}
			n++
		}
		return nil
	}
	// A --since replay is held until sagad says both sources caught up,
	// then printed in time order. Live events are printed as they come,
	// each reply's in time order.
	replaying := w.since > 0
	var held []capsule.Event
	flush := func() error {
		slices.SortStableFunc(held, func(a, b capsule.Event) int { return a.At.Compare(b.At) })
		err := emit(held)
		held = nil
		return err
	}
	for !full() && ctx.Err() == nil {
		wait := watchPoll
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl)*9/10)
		}
		req.MaxWaitMS = max(wait.Milliseconds(), 0)
		page, err := w.admin.Events(ctx, req)
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, store.ErrNoTopology) {
			return store.ErrNoTopology
		}
		if err != nil {
			return fmt.Errorf("watch: %w", err)
		}
		req.Cursor, req.Since = page.NextCursor, nil
		evs := page.Events
		for _, r := range page.Revisions {
			evs = append(evs, printed.events(r)...)
		}
		slices.SortStableFunc(evs, func(a, b capsule.Event) int { return a.At.Compare(b.At) })
		if !replaying {
			if err := emit(evs); err != nil {
				return err
			}
			continue
		}
		held = append(held, evs...)
		if page.CaughtUp || len(held) >= watchReplayLimit {
			replaying = !page.CaughtUp
			if err := flush(); err != nil {
				return err
			}
		}
	}
	// Stopped mid-replay (--timeout, Ctrl-C): what was read is still shown.
	if err := flush(); err != nil {
		return err
	}
	if w.count > 0 && n < w.count && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return exit(ExitTimeout, fmt.Errorf("timed out after %d of %d events", n, w.count))
	}
	return nil
}

// print writes the n-th (from 0) event of the watch in its output format.
func (w *watchCmd) print(out io.Writer, enc *json.Encoder, ev capsule.Event, n int) error {
	switch w.output {
	case outputJSON:
		return enc.Encode(ev)
	case outputYAML:
		if n > 0 {
			if _, err := io.WriteString(out, "---\n"); err != nil {
				return err
			}
		}
		return writeYAML(out, ev)
	}
	return printWatchEvent(out, ev)
}

// watchSlack: see Run.
const watchSlack = 5 * time.Second

// watchKeyLimit bounds the capsules whose printed history a watch remembers.
const watchKeyLimit = 65536

// printedHistory counts, per capsule key, the history entries a watch has
// shown, remembering the newest watchKeyLimit capsules.
type printedHistory struct {
	n     map[string]int
	order []string
}

func newPrintedHistory() *printedHistory { return &printedHistory{n: make(map[string]int)} }

// events are the events of a checkpoint revision past those shown of its
// capsule: sagad sends a revision's events from the watch's start on, so
// each revision repeats the one before and adds to it.
func (p *printedHistory) events(r admin.Revision) []capsule.Event {
	done, known := p.n[r.Key]
	if done > len(r.Events) {
		done = 0 // the key was reused
	}
	evs := r.Events[done:]
	if !known {
		if p.order = append(p.order, r.Key); len(p.order) > watchKeyLimit {
			delete(p.n, p.order[0])
			p.order = p.order[1:]
		}
	}
	p.n[r.Key] = len(r.Events)
	return evs
}

// printWatchEvent writes one event as a line, and its findings indented below.
func printWatchEvent(out io.Writer, ev capsule.Event) error {
	id := ev.CapsuleID
	if id == "" {
		id = ev.Key
	}
	detail := ev.Detail
	if ev.By != "" {
		detail = strings.TrimSpace(detail + " (by " + ev.By + ")")
	}
	phase := fmt.Sprintf("%d %s", ev.Phase, printable(ev.PhaseName))
	if _, err := fmt.Fprintf(out, "%-24s  %-36s  %-20s  %-18s  %-5d  %s\n",
		ev.At.UTC().Format("2006-01-02T15:04:05.000Z"), dash(id), pf(ev.Kind), phase, ev.Cycle, dash(detail)); err != nil {
		return err
	}
	for _, f := range ev.Findings {
		rule := "-"
		if f.Rule != 0 {
			rule = fmt.Sprint(f.Rule)
		}
		if _, err := fmt.Fprintf(out, "    rule %s  %s  %s\n", rule, dash(f.Field), printable(f.Message)); err != nil {
			return err
		}
	}
	return nil
}

// validWatchKey refuses what would change the subject's meaning: tokens
// separators, wildcards and whitespace.
func validWatchKey(key string) bool {
	return key != "" && !strings.ContainsAny(key, ".*> \t\r\n")
}

func newWatch(g *globals) *cobra.Command {
	var since, timeout time.Duration
	var count int
	cmd := &cobra.Command{
		Use:   "watch [ID] [--since D] [--count N] [--timeout D]",
		Short: "Stream lifecycle events live, of every capsule or of one",
		Long: `Print lifecycle events as sagad publishes them: time, capsule, event,
phase, cycle and detail, one line each (findings indented below), or one
JSON object per line with -o json (one YAML document per event with -o yaml). With ID, only that capsule's events.

Starts with the next event; --since D first replays the events of the last D,
in time order, then goes on live. Runs until Ctrl-C, --count N events, or
--timeout D. sagad reads the events for it (saga.admin.events): a watch
leaves no consumer behind.

Exit codes: 0 stopped (Ctrl-C, --count reached, or --timeout without
--count), 2 usage, 21 --timeout before --count events arrived.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			w := &watchCmd{since: since, count: count, output: g.output, now: time.Now}
			if len(args) == 1 {
				if !validWatchKey(args[0]) {
					return exit(ExitUsage, fmt.Errorf("capsule id %q: must not contain '.', '*', '>' or spaces", args[0]))
				}
				w.key = args[0]
			}
			if since < 0 || count < 0 || timeout < 0 {
				return exit(ExitUsage, errors.New("--since, --count and --timeout must not be negative"))
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			nc, err := g.dialNATS()
			if err != nil {
				return err
			}
			defer nc.Close()
			w.admin = adminsvc.NewClient(nc, adminsvc.ClientConfig{})
			return w.Run(ctx, cmd.OutOrStdout())
		},
	}
	cmd.Flags().DurationVar(&since, "since", 0, "first replay the events of this long ago (e.g. 10m)")
	cmd.Flags().IntVar(&count, "count", 0, "stop after this many events (0: no limit)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "stop after this long (0: no limit)")
	return cmd
}
