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
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/store"
)

// watchCmd is `sagactl watch`: it follows the lifecycle event stream live.
type watchCmd struct {
	js jetstream.JetStream
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

// watchItem is one message of either source a watch follows.
type watchItem struct {
	msg        jetstream.Msg // nil in a bare caught-up marker
	checkpoint bool          // a checkpoint revision, not an events-stream message
	// caughtUp: the source has delivered all it held when the watch began
	// (the --since replay); what follows is live.
	caughtUp bool
	err      error
}

// watchReplayLimit bounds the events a --since replay holds back to sort:
// past it, they are printed in time order as far as held, and the rest of
// the replay after them.
const watchReplayLimit = 100_000

// watchDeleteTimeout bounds the deletion of a watch's consumers as it
// exits; one the deletion misses, JetStream removes after its inactivity
// threshold (5 minutes).
const watchDeleteTimeout = 2 * time.Second

// Run prints each event as it arrives until ctx ends or count is reached.
// It returns nil when ctx is cancelled (Ctrl-C), and an ExitTimeout error
// when ctx's deadline passes before count events arrived.
//
// A transition's events are derived from the checkpoint revision that
// records it (KV bucket SAGA_CHECKPOINTS); pauses, operator actions and
// duplicates are on the events stream. Run follows both.
func (w *watchCmd) Run(ctx context.Context, out io.Writer) error {
	evSubject := store.EventsPrefix + ">"
	cpSubject := "$KV." + store.CheckpointsBucket + ".>"
	if w.key != "" {
		evSubject = store.EventSubject(w.key)
		cpSubject = "$KV." + store.CheckpointsBucket + "." + w.key
	}
	start := w.now()
	// A transition is stamped a moment before its checkpoint revision is
	// stored: without --since, transitions stamped this much before the
	// watch began still show when their revision arrives after it.
	from := start.Add(-watchSlack)
	if w.since > 0 {
		start = start.Add(-w.since)
		from = start
	}
	ctx, cancel := context.WithCancel(ctx)
	var followers sync.WaitGroup
	defer followers.Wait() // after cancel (deferred below, so run first)
	defer cancel()
	items := make(chan watchItem)
	follow := func(stream, subject string, checkpoint bool) error {
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, DeliverPolicy: jetstream.DeliverNewPolicy}
		if w.since > 0 {
			cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
			cfg.OptStartTime = &start
		}
		cons, err := w.js.OrderedConsumer(ctx, stream, cfg)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return store.ErrNoTopology
		}
		if err != nil {
			return fmt.Errorf("watch %s: %w", subject, err)
		}
		it, err := cons.Messages()
		if err != nil {
			return fmt.Errorf("watch %s: %w", subject, err)
		}
		// Without --since nothing is replayed; with it, the consumer held
		// NumPending messages when it was created.
		caught := w.since == 0
		if info := cons.CachedInfo(); info != nil && info.NumPending == 0 {
			caught = true
		}
		followers.Add(1)
		go func() {
			defer followers.Done()
			defer w.deleteConsumer(stream, cons)
			defer it.Stop()
			stopOnDone := context.AfterFunc(ctx, it.Stop)
			defer stopOnDone()
			send := func(item watchItem) bool {
				select {
				case items <- item:
					return true
				case <-ctx.Done():
					return false
				}
			}
			if caught && !send(watchItem{checkpoint: checkpoint, caughtUp: true}) {
				return
			}
			for {
				msg, err := it.Next()
				if err != nil && (ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed)) {
					return
				}
				item := watchItem{msg: msg, checkpoint: checkpoint, err: err}
				if err == nil && !caught {
					if md, merr := msg.Metadata(); merr == nil && md.NumPending == 0 {
						caught, item.caughtUp = true, true
					}
				}
				if !send(item) || err != nil {
					return
				}
			}
		}()
		return nil
	}
	if err := follow(store.EventsStream, evSubject, false); err != nil {
		return err
	}
	if err := follow("KV_"+store.CheckpointsBucket, cpSubject, true); err != nil {
		return err
	}

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
	// A --since replay reads two sources, each in its own order: their
	// events are held until both have caught up, then printed in time
	// order. Live events are printed as they come.
	replaying := 2
	var held []capsule.Event
	flush := func() error {
		slices.SortStableFunc(held, func(a, b capsule.Event) int { return a.At.Compare(b.At) })
		err := emit(held)
		held = nil
		return err
	}
	for !full() {
		var item watchItem
		select {
		case item = <-items:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		if item.err != nil {
			return fmt.Errorf("watch: %w", item.err)
		}
		var evs []capsule.Event
		switch {
		case item.msg == nil:
		case item.checkpoint:
			evs = printed.events(item.msg, from)
		default:
			var err error
			if evs, err = capsule.DecodeEvents(item.msg.Data()); err != nil {
				evs = nil // not ours to judge; history skips it too
			}
		}
		if replaying == 0 {
			if err := emit(evs); err != nil {
				return err
			}
			continue
		}
		held = append(held, evs...)
		if item.caughtUp {
			replaying--
		}
		if replaying == 0 || len(held) >= watchReplayLimit {
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

// deleteConsumer removes the watch's consumer on stream as it exits, so
// that watches started and stopped leave nothing behind. Best effort: the
// operator role may delete consumers on the streams a watch reads.
func (w *watchCmd) deleteConsumer(stream string, cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), watchDeleteTimeout)
	defer cancel()
	_ = w.js.DeleteConsumer(ctx, stream, info.Name)
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

// events are the events of the transitions a checkpoint revision adds to
// what was shown of its capsule, made at or after from.
func (p *printedHistory) events(msg jetstream.Msg, from time.Time) []capsule.Event {
	if len(msg.Data()) == 0 {
		return nil // a delete or purge marker
	}
	cp := new(capsule.Checkpoint)
	if json.Unmarshal(msg.Data(), cp) != nil {
		return nil
	}
	done, known := p.n[cp.Key]
	if done > len(cp.History) {
		done = 0 // the key was reused
	}
	var evs []capsule.Event
	fresh := *cp
	fresh.History = cp.History[done:]
	for _, ev := range machine.CheckpointEvents(&fresh) {
		if !ev.At.Before(from) {
			evs = append(evs, ev)
		}
	}
	if !known {
		if p.order = append(p.order, cp.Key); len(p.order) > watchKeyLimit {
			delete(p.n, p.order[0])
			p.order = p.order[1:]
		}
	}
	p.n[cp.Key] = len(cp.History)
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
--timeout D, and deletes its JetStream consumers as it exits.

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
			cctx, cancel := contextWithTimeout(cmd, g)
			defer cancel()
			_, js, closeFn, err := g.connect(cctx)
			if err != nil {
				return err
			}
			defer closeFn()
			w.js = js
			return w.Run(ctx, cmd.OutOrStdout())
		},
	}
	cmd.Flags().DurationVar(&since, "since", 0, "first replay the events of this long ago (e.g. 10m)")
	cmd.Flags().IntVar(&count, "count", 0, "stop after this many events (0: no limit)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "stop after this long (0: no limit)")
	return cmd
}
