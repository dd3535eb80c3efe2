package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// system is one thing under test, seen from the driver: where capsules go
// in, where their terminal states come out, and how to tell that all work
// has settled.
type system struct {
	name string
	// publish sends capsule id with its bytes into the system.
	publish func(ctx context.Context, id string, raw []byte) error
	// outcomeStream holds exactly one message per finished capsule.
	outcomeStream string
	// outcome reads an outcome message.
	outcome func(msg jetstream.Msg) outcome
	// check returns "" when o is what class c must end in, else what differs.
	check func(o outcome, c Class) string
	// quiesce returns once no message is pending or unacknowledged on any
	// consumer of the work streams.
	quiesce func(ctx context.Context) error
}

// outcome is a terminal state as an outcome message reports it.
type outcome struct {
	id    string
	state string
	cycle int
	halt  string
}

// Batch is one driven batch of capsules: how fast they went through and
// what became of them.
type Batch struct {
	// Capsules is the number of capsules published.
	Capsules int `json:"capsules"`
	// Finished is the number that reached a terminal state.
	Finished int `json:"finished"`
	// Elapsed runs from the first publish to the last outcome.
	Elapsed time.Duration `json:"elapsed_ns"`
	// PerSecond is Finished / Elapsed.
	PerSecond float64 `json:"capsules_per_second"`
	// Latency is publish → outcome, over the finished capsules.
	Latency Latency `json:"latency"`
	// PublishErrors counts capsules whose publish failed after retries.
	PublishErrors int `json:"publish_errors"`
	// Stalled is true when the batch gave up waiting for outcomes.
	Stalled bool `json:"stalled,omitempty"`
	// CPU is the process's user + system CPU time over the batch: sagad or
	// the relay, the embedded server and the driver together.
	CPU time.Duration `json:"cpu_ns"`
	// CoresBusy is CPU / Elapsed: how many cores the batch kept busy.
	CoresBusy float64 `json:"cores_busy"`
	// CPUPerCapsule is CPU / Finished.
	CPUPerCapsule time.Duration `json:"cpu_per_capsule_ns"`
	// DiskPerCapsule is bytes written to storage (the server's file store)
	// over the batch, per finished capsule.
	DiskPerCapsule uint64 `json:"disk_bytes_per_capsule"`
}

// tracker follows every capsule of one system from publish to outcome. It
// keeps one byte per capsule ever published and a start time per capsule in
// flight, so its own memory stays small next to what it measures.
type tracker struct {
	sys *system
	gen *Generator

	mu       sync.Mutex
	slots    chan struct{} // the offered-load window: one token per capsule in flight
	seen     []uint8       // by sequence number: 0 not published, 1 in flight, 2+ outcomes seen + 1
	inflight map[uint64]time.Time
	batch    *batchState
	progress chan struct{} // signalled on every first outcome
	strays   int
	dups     int
	wrong    int
	samples  []string // first few wrong outcomes and duplicates, for the report
	byState  map[string]int
}

type batchState struct {
	latencies []time.Duration
	first     time.Time
	last      time.Time
	finished  int
}

func newTracker(sys *system, gen *Generator) *tracker {
	return &tracker{
		sys:      sys,
		gen:      gen,
		inflight: map[uint64]time.Time{},
		progress: make(chan struct{}, 1),
		byState:  map[string]int{},
	}
}

const maxSamples = 8

func (t *tracker) sample(format string, args ...any) {
	if len(t.samples) < maxSamples {
		t.samples = append(t.samples, fmt.Sprintf(format, args...))
	}
}

// observe records one outcome message; it is the ordered consumer's handler.
func (t *tracker) observe(msg jetstream.Msg) {
	now := time.Now()
	o := t.sys.outcome(msg)
	seq, ok := t.gen.Seq(o.id)
	t.mu.Lock()
	defer t.mu.Unlock()
	if !ok || seq >= uint64(len(t.seen)) || t.seen[seq] == 0 {
		t.strays++
		t.sample("%s: outcome for a capsule never published: %q", t.sys.name, o.id)
		return
	}
	if t.seen[seq] >= 2 {
		t.dups++
		t.sample("%s: duplicate outcome for %s (%s)", t.sys.name, o.id, o.state)
		if t.seen[seq] < 255 {
			t.seen[seq]++
		}
		return
	}
	t.seen[seq] = 2
	t.byState[o.state]++
	if why := t.sys.check(o, t.gen.Class(seq)); why != "" {
		t.wrong++
		t.sample("%s: %s (%s): %s", t.sys.name, o.id, t.gen.Class(seq), why)
	}
	start := t.inflight[seq]
	delete(t.inflight, seq)
	if b := t.batch; b != nil && !start.IsZero() {
		b.latencies = append(b.latencies, now.Sub(start))
		b.last = now
		b.finished++
	}
	if t.slots != nil {
		select {
		case <-t.slots:
		default:
		}
	}
	select {
	case t.progress <- struct{}{}:
	default:
	}
}

// publishers is how many goroutines publish at once. Publishes are
// synchronous (a capsule counts as sent once JetStream stored it), so too few
// of them cap what is in flight below the window: with 4, the baseline ran
// with ~60 capsules in flight of a window of 200 while sagad ran with 100–180,
// and the two were not measured at the same offered load. 16 keep the window
// full for both on this machine.
const publishers = 16

// drive publishes n capsules, seq(0) … seq(n-1), keeping at most window
// of them in flight, and waits for their outcomes. It gives up when no
// outcome arrives for stall.
// With rate > 0 capsules are published at that rate (open loop), the window
// only capping what is in flight; with 0 a new capsule goes out as soon as
// one finishes (closed loop).
func (t *tracker) drive(ctx context.Context, n, window int, rate float64, seq func(i int) uint64, stall time.Duration) (Batch, error) {
	b := &batchState{latencies: make([]time.Duration, 0, n)}
	slots := make(chan struct{}, window)
	cpu0, wall0, disk0 := cpuTime(), time.Now(), diskWritten()
	t.mu.Lock()
	t.batch = b
	t.slots = slots
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.batch = nil
		t.mu.Unlock()
	}()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan uint64)
	var wg sync.WaitGroup
	var pubErrs int
	var firstErr error
	var errMu sync.Mutex
	for range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				if err := t.send(ctx, s); err != nil {
					errMu.Lock()
					pubErrs++
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
				}
			}
		}()
	}
	stalled := false
	var tick <-chan time.Time
	if rate > 0 {
		tk := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer tk.Stop()
		tick = tk.C
	}
feed:
	for i := range n {
		if tick != nil {
			select {
			case <-tick:
			case <-ctx.Done():
				break feed
			}
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			break feed
		}
		select {
		case work <- seq(i):
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()

	timer := time.NewTimer(stall)
	defer timer.Stop()
	for {
		t.mu.Lock()
		done := b.finished+pubErrs >= n
		t.mu.Unlock()
		if done {
			break
		}
		select {
		case <-t.progress:
			if !timer.Stop() {
				<-timer.C
			}
			timer.Reset(stall)
		case <-timer.C:
			stalled = true
		case <-ctx.Done():
			return Batch{}, ctx.Err()
		}
		if stalled {
			break
		}
	}

	cpu, wall, disk := cpuTime()-cpu0, time.Since(wall0), diskWritten()-disk0
	t.mu.Lock()
	defer t.mu.Unlock()
	out := Batch{Capsules: n, Finished: b.finished, PublishErrors: pubErrs, Stalled: stalled, CPU: cpu}
	if wall > 0 {
		out.CoresBusy = cpu.Seconds() / wall.Seconds()
	}
	if b.finished > 0 {
		out.CPUPerCapsule = cpu / time.Duration(b.finished)
		out.DiskPerCapsule = disk / uint64(b.finished)
	}
	if b.finished > 0 {
		out.Elapsed = b.last.Sub(b.first)
		if out.Elapsed > 0 {
			out.PerSecond = float64(b.finished) / out.Elapsed.Seconds()
		}
	}
	out.Latency = summarize(b.latencies)
	if firstErr != nil && pubErrs == n {
		return out, fmt.Errorf("%s: every publish failed: %w", t.sys.name, firstErr)
	}
	return out, nil
}

// publishAttempts bounds retries of one publish. A retried publish that had
// in fact been stored is de-duplicated by its Nats-Msg-Id.
const publishAttempts = 5

// send builds, registers and publishes capsule s. On failure the capsule
// leaves the window and counts as not published.
func (t *tracker) send(ctx context.Context, s uint64) error {
	raw := t.gen.Sealed(s, time.Now())
	id := t.gen.ID(s)
	t.mu.Lock()
	for uint64(len(t.seen)) <= s {
		t.seen = append(t.seen, make([]uint8, max(1024, len(t.seen)))...)
	}
	t.seen[s] = 1
	now := time.Now()
	t.inflight[s] = now
	if b := t.batch; b != nil && b.first.IsZero() {
		b.first = now
	}
	t.mu.Unlock()
	var err error
	for attempt := 1; ; attempt++ {
		err = t.sys.publish(ctx, id, raw)
		if err == nil {
			return nil
		}
		if attempt == publishAttempts || ctx.Err() != nil {
			break
		}
		select {
		case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	t.abandon(s)
	return fmt.Errorf("%s: publish %s: %w", t.sys.name, id, err)
}

// abandon takes an unpublished capsule out of the window.
func (t *tracker) abandon(s uint64) {
	t.mu.Lock()
	delete(t.inflight, s)
	if s < uint64(len(t.seen)) && t.seen[s] == 1 {
		t.seen[s] = 0
	}
	if t.slots != nil {
		select {
		case <-t.slots:
		default:
		}
	}
	t.mu.Unlock()
}

// Delivery is the exactly-once account of one system over a whole run.
type Delivery struct {
	// Published is the number of distinct capsules published.
	Published int `json:"published"`
	// Finished is the number with at least one outcome.
	Finished int `json:"finished"`
	// Lost is Published − Finished.
	Lost int `json:"lost"`
	// Duplicates counts outcome messages beyond the first of a capsule.
	Duplicates int `json:"duplicates"`
	// Strays counts outcomes of capsules this run never published.
	Strays int `json:"strays"`
	// Wrong counts capsules whose outcome is not what their class must end in.
	Wrong int `json:"wrong"`
	// StoredOutcomes is the outcome stream's message count after the
	// system settled; it must equal Published.
	StoredOutcomes uint64 `json:"stored_outcomes"`
	// ByState counts first outcomes by terminal state.
	ByState map[string]int `json:"by_state"`
	// Samples describe the first problems found.
	Samples []string `json:"samples,omitempty"`
	// HistoriesForgotten is how many sampled checkpoints sagad had already
	// removed (retention), so could not be checked.
	HistoriesForgotten int `json:"histories_forgotten,omitempty"`
	// HistoriesChecked is how many checkpoints were read back and checked.
	HistoriesChecked int `json:"histories_checked,omitempty"`
	// Problems are further failed checks (checkpoint samples, settling).
	Problems []string `json:"problems,omitempty"`
}

// OK reports whether every capsule finished exactly once as expected.
func (d Delivery) OK() bool {
	return d.Lost == 0 && d.Duplicates == 0 && d.Strays == 0 && d.Wrong == 0 &&
		d.StoredOutcomes == uint64(d.Published) && len(d.Problems) == 0
}

// settle waits for the system to have no pending work, then counts what
// its outcome stream stored, and returns the delivery account.
func (t *tracker) settle(ctx context.Context, srv *server.Server) Delivery {
	var d Delivery
	if err := t.sys.quiesce(ctx); err != nil {
		d.Problems = append(d.Problems, fmt.Sprintf("did not settle: %v", err))
	}
	if n, err := storedMsgs(srv, t.sys.outcomeStream); err != nil {
		d.Problems = append(d.Problems, fmt.Sprintf("outcome stream: %v", err))
	} else {
		d.StoredOutcomes = n
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, v := range t.seen {
		if v >= 1 {
			d.Published++
		}
		if v >= 2 {
			d.Finished++
		}
	}
	d.Lost = d.Published - d.Finished
	d.Duplicates, d.Strays, d.Wrong = t.dups, t.strays, t.wrong
	d.ByState = make(map[string]int, len(t.byState))
	for k, v := range t.byState {
		d.ByState[k] = v
	}
	d.Samples = append([]string(nil), t.samples...)
	return d
}

// published returns the sequence numbers of up to n published capsules:
// the first 20 (every class of a mix) and the rest spread over the run.
func (t *tracker) published(n int) []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var all []uint64
	for s, v := range t.seen {
		if v >= 1 {
			all = append(all, uint64(s))
		}
	}
	if len(all) <= n {
		return all
	}
	out := slices.Clone(all[:20])
	rest := all[20:]
	step := max(len(rest)/(n-20), 1)
	for i := 0; i < len(rest) && len(out) < n; i += step {
		out = append(out, rest[i])
	}
	return out
}

// errNotSettled is returned by a quiesce that ran out of time.
var errNotSettled = errors.New("work still pending")

// quiesceTick is how often a quiesce polls.
const quiesceTick = 20 * time.Millisecond

// waitIdle polls the server's own account statistics, in process, so that
// polling puts nothing on the wire (the round-trip observer would count
// it), until no consumer of streams has pending or unacknowledged messages.
func waitIdle(ctx context.Context, srv *server.Server, streams []string) error {
	for {
		busy, err := busyConsumer(srv, streams)
		if err != nil {
			return err
		}
		if busy == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s", errNotSettled, busy)
		case <-time.After(quiesceTick):
		}
	}
}

// busyConsumer names a consumer of streams with work left, or "".
func busyConsumer(srv *server.Server, streams []string) (string, error) {
	ad, err := srv.JszAccount(&server.JSzOptions{Account: server.DEFAULT_GLOBAL_ACCOUNT, Streams: true, Consumer: true})
	if err != nil {
		return "", err
	}
	for _, sd := range ad.Streams {
		if !slices.Contains(streams, sd.Name) {
			continue
		}
		for _, ci := range sd.Consumer {
			if ci.NumPending > 0 || ci.NumAckPending > 0 {
				return fmt.Sprintf("%s/%s: %d pending, %d unacknowledged", sd.Name, ci.Name, ci.NumPending, ci.NumAckPending), nil
			}
		}
	}
	return "", nil
}

// storedMsgs is the message count of stream, read in process.
func storedMsgs(srv *server.Server, stream string) (uint64, error) {
	ad, err := srv.JszAccount(&server.JSzOptions{Account: server.DEFAULT_GLOBAL_ACCOUNT, Streams: true})
	if err != nil {
		return 0, err
	}
	for _, sd := range ad.Streams {
		if sd.Name == stream {
			return sd.State.Msgs, nil
		}
	}
	return 0, fmt.Errorf("stream %s not found", stream)
}

// watch consumes the system's outcome stream from now on into t.
func (t *tracker) watch(ctx context.Context, js jetstream.JetStream) (stop func(), err error) {
	cons, err := js.OrderedConsumer(ctx, t.sys.outcomeStream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		return nil, fmt.Errorf("%s: outcome consumer: %w", t.sys.name, err)
	}
	cc, err := cons.Consume(t.observe)
	if err != nil {
		return nil, fmt.Errorf("%s: consume outcomes: %w", t.sys.name, err)
	}
	return cc.Stop, nil
}
