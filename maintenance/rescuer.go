package maintenance

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/store"
)

// RescuerConfig configures a [Rescuer].
type RescuerConfig struct {
	// Logger receives every rescue. Defaults to discarding.
	Logger *slog.Logger
	// Metrics counts rescues and receives the count of capsules waiting
	// for an operator decision ([metrics.Metrics.AwaitingOperator]). Nil
	// counts nothing.
	Metrics *metrics.Metrics
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// After is how long a capsule in progress may go without a checkpoint
	// write, its phase's queue empty, before its step is sent again.
	// Defaults to 2m.
	After time.Duration
	// Interval is how often quiet capsules are looked at. Defaults to After/4.
	Interval time.Duration
	// MaxChecks bounds the checkpoint reads of one look. Defaults to 500.
	MaxChecks int
}

func (c RescuerConfig) withDefaults() RescuerConfig {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.After <= 0 {
		c.After = 2 * time.Minute
	}
	if c.Interval <= 0 {
		c.Interval = c.After / 4
	}
	if c.MaxChecks <= 0 {
		c.MaxChecks = 500
	}
	return c
}

// Rescuer is the maintenance service that finds a capsule in progress
// whose next step has no message — its checkpoint has not changed for
// longer than After and the queue of its phase is empty — and sends the
// step again. It is the safety net under the exactly-once protocol (a lost
// message, a bug): the step it re-emits is harmless if a message does
// exist, since a second phase message finds its transition recorded.
//
// It follows every checkpoint's revision (metadata only, no values) and
// reads a checkpoint only once it has been quiet for After; an ended one is
// then forgotten until it changes again, so every capsule costs one read
// after it ends.
type Rescuer struct {
	st  *store.Store
	cfg RescuerConfig
	log *slog.Logger

	mu   sync.Mutex
	last map[string]time.Time // key → when its checkpoint last changed
	// gate holds the capsules whose checkpoint, when last read, waited
	// for an operator decision and has not changed since: the operator
	// gate's count (it keeps no continuation to count). A read costs
	// nothing more: the rescuer reads every quiet checkpoint once anyway.
	gate map[string]struct{}
	stop context.CancelFunc
	done chan struct{}
}

// NewRescuer returns a rescuer over st.
func NewRescuer(st *store.Store, cfg RescuerConfig) *Rescuer {
	cfg = cfg.withDefaults()
	return &Rescuer{st: st, cfg: cfg, log: cfg.Logger, last: make(map[string]time.Time), gate: make(map[string]struct{})}
}

// Start follows the checkpoints and looks at quiet ones every Interval until
// Stop (or ctx ends).
func (r *Rescuer) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done != nil {
		return nil
	}
	ctx, stop := context.WithCancel(ctx)
	w, err := r.st.Checkpoints.WatchMeta(ctx)
	if err != nil {
		stop()
		return err
	}
	r.stop, r.done = stop, make(chan struct{})
	go func(done chan<- struct{}) {
		defer close(done)
		defer func() { _ = w.Stop() }()
		t := time.NewTicker(r.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				r.observe(e)
			case <-t.C:
				r.Rescue(ctx)
			}
		}
	}(r.done)
	return nil
}

// Stop stops the rescuer and returns once it has.
func (r *Rescuer) Stop() {
	r.mu.Lock()
	stop, done := r.stop, r.done
	r.stop, r.done = nil, nil
	r.mu.Unlock()
	if done == nil {
		return
	}
	stop()
	<-done
}

func (r *Rescuer) observe(e jetstream.KeyValueEntry) {
	if e == nil {
		return // the end of the initial values
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.gate, e.Key()) // changed: read again once quiet
	if e.Operation() != jetstream.KeyValuePut {
		delete(r.last, e.Key())
		return
	}
	// The entry's own time for initial values, so a sagad that starts does
	// not wait After again for capsules that were quiet already.
	r.last[e.Key()] = e.Created()
}

// Rescue looks once at the capsules whose checkpoints have been quiet for
// longer than After (at most MaxChecks of them) and sends the step of each
// one still in progress with nothing queued for its phase.
func (r *Rescuer) Rescue(ctx context.Context) {
	defer r.countGate()
	now := r.cfg.Now()
	r.mu.Lock()
	var quiet []string
	for k, at := range r.last {
		if now.Sub(at) > r.cfg.After {
			quiet = append(quiet, k)
			if len(quiet) >= r.cfg.MaxChecks {
				break
			}
		}
	}
	r.mu.Unlock()
	idle := map[capsule.Phase]bool{}
	for _, key := range quiet {
		if ctx.Err() != nil {
			return
		}
		cp, _, err := r.st.Checkpoints.GetLatest(ctx, key, nil)
		if r.st.Checkpoints.Corrupt.Report(err, "not rescued: a message about the capsule halts it") {
			// A value sagad did not write reads the same next time: looking
			// again every pass would only crowd out the capsules that can
			// be rescued (MaxChecks).
			r.mu.Lock()
			delete(r.last, key)
			r.mu.Unlock()
			continue
		}
		if err != nil {
			continue // gone, or try again next time
		}
		st := cp.State
		if st.Status != capsule.InProgress {
			// Ended, or parked (the sweeper's): forget it until its
			// checkpoint changes again.
			r.forget(key, cp)
			continue
		}
		if now.Sub(cp.UpdatedAt) <= r.cfg.After {
			continue // it moved meanwhile: look again later
		}
		ph := st.Phase
		empty, seen := idle[ph]
		if !seen {
			empty = r.phaseIdle(ctx, ph)
			idle[ph] = empty
		}
		if !empty {
			continue // its message may be queued or in flight: not stuck
		}
		if cp.Run > 1 {
			// A replayed run: its own bytes, kept again if the replay died
			// before it kept them.
			if _, _, err := r.st.RunBytes(ctx, cp); err != nil {
				continue
			}
		}
		if err := r.st.PublishPhase(ctx, cp, ""); err != nil {
			r.log.Warn("rescue: send the step again", "key", key, "error", err)
			// Not again at the next look but after After, as after a
			// rescue: while JetStream refuses writes, every quiet capsule
			// would otherwise be tried, and logged, every Interval.
			r.mu.Lock()
			r.last[key] = now
			r.mu.Unlock()
			continue
		}
		r.cfg.Metrics.Rescued(ph)
		r.log.Warn("capsule rescued: its step had no message, sent again", "capsule_id", cp.CapsuleID, "key", key,
			"phase", ph.String(), "cycle", st.Cycle, "trace_id", cp.TraceID, "quiet_for", now.Sub(cp.UpdatedAt).Round(time.Second))
		r.mu.Lock()
		r.last[key] = now // give the step its time before looking again
		r.mu.Unlock()
	}
}

// forget drops key, a capsule no longer in progress, unless its checkpoint
// changed after cp was written.
func (r *Rescuer) forget(key string, cp *capsule.Checkpoint) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if at, ok := r.last[key]; ok && !at.After(cp.UpdatedAt.Add(time.Second)) {
		delete(r.last, key)
		if cp.State.Status == capsule.WaitingForOperator {
			r.gate[key] = struct{}{}
		}
	}
}

// countGate reports the capsules known to wait for an operator decision.
func (r *Rescuer) countGate() {
	r.mu.Lock()
	n := len(r.gate)
	r.mu.Unlock()
	r.cfg.Metrics.AwaitingOperator(n)
}

// phaseIdle reports whether phase ph's consumer has nothing queued, nothing
// in flight and is not paused: a capsule waiting there has no message.
func (r *Rescuer) phaseIdle(ctx context.Context, ph capsule.Phase) bool {
	cons, err := r.st.JetStream().Consumer(ctx, store.PhaseStream(ph), store.ConsumerName(ph))
	if err != nil {
		return false
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return false
	}
	return !info.Paused && info.NumPending == 0 && info.NumAckPending == 0
}
