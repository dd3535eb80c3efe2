package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

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
// It learns of a change two ways. This process's own writes are noted as
// they are made (store.Checkpoints.OnWrite), with the checkpoint written:
// one in progress is timed from then, one that ended is forgotten at once
// and one waiting for an operator decision is counted at once. Every other
// writer's (another sagad, sagactl) is found by a look at the bucket every
// Interval, headers only, from where the last look stopped: the bucket
// keeps a key's last revision only, so a look is sent each key written
// since the last one once, however often it was written meanwhile, and a
// revision this process noted already is skipped. A checkpoint is read
// only once it has been quiet for After.
type Rescuer struct {
	st  *store.Store
	cfg RescuerConfig
	log *slog.Logger

	// run serialises Start and Stop; mu guards the rest.
	run  sync.Mutex
	stop context.CancelFunc
	done chan struct{}

	mu sync.Mutex
	// last holds, by key, when its checkpoint last changed and at which
	// revision, for each capsule that may be in progress: a map the size
	// of the capsules in flight (those this process ended are dropped at
	// once), looked up at every write.
	last map[string]mark
	// gate holds the capsules whose checkpoint, when last read or written
	// here, waited for an operator decision and has not changed since:
	// the operator gate's count (it keeps no continuation to count), at
	// the revision that put it there.
	gate map[string]uint64
	// own holds the revisions this process wrote from next on: the look
	// skips them, noted already.
	own seqSet
	// next is the bucket's stream sequence the next look starts from.
	next uint64
}

// mark is when a key's checkpoint last changed and at which revision.
type mark struct {
	at  time.Time
	rev uint64
}

// NewRescuer returns a rescuer over st.
func NewRescuer(st *store.Store, cfg RescuerConfig) *Rescuer {
	cfg = cfg.withDefaults()
	return &Rescuer{st: st, cfg: cfg, log: cfg.Logger, last: make(map[string]mark), gate: make(map[string]uint64),
		own: seqSet{base: 1}, next: 1}
}

// Start notes this process's checkpoint writes from now on, and looks at
// the bucket (first at once: every checkpoint it holds) and at quiet
// capsules every Interval until Stop (or ctx ends).
func (r *Rescuer) Start(ctx context.Context) error {
	r.run.Lock()
	defer r.run.Unlock()
	if r.done != nil {
		return nil
	}
	ctx, stop := context.WithCancel(ctx)
	r.st.Checkpoints.OnWrite(r.wrote)
	r.stop, r.done = stop, make(chan struct{})
	go func(done chan<- struct{}) {
		defer close(done)
		t := time.NewTicker(r.cfg.Interval)
		defer t.Stop()
		if _, err := r.look(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("rescue: look at the checkpoints", "error", err)
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if _, err := r.look(ctx); err != nil && ctx.Err() == nil {
					r.log.Warn("rescue: look at the checkpoints", "error", err)
				}
				r.Rescue(ctx)
			}
		}
	}(r.done)
	return nil
}

// Stop stops the rescuer and returns once it has.
func (r *Rescuer) Stop() {
	r.run.Lock()
	stop, done := r.stop, r.done
	r.stop, r.done = nil, nil
	r.run.Unlock()
	if done == nil {
		return
	}
	r.st.Checkpoints.OnWrite(nil)
	stop()
	<-done
}

// wrote notes a checkpoint this process wrote at revision rev.
func (r *Rescuer) wrote(cp *capsule.Checkpoint, rev uint64) {
	now := r.cfg.Now()
	key := cp.Key
	r.mu.Lock()
	defer r.mu.Unlock()
	if rev >= r.next {
		r.own.add(rev)
	}
	if m, ok := r.last[key]; ok && m.rev > rev {
		return // a later write was noted already
	}
	if g, ok := r.gate[key]; ok {
		if g > rev {
			return
		}
		delete(r.gate, key)
	}
	switch cp.State.Status {
	case capsule.InProgress:
		r.last[key] = mark{at: now, rev: rev}
	case capsule.WaitingForOperator:
		delete(r.last, key)
		r.gate[key] = rev
	default:
		// Ended, or parked (the sweeper's): nothing to rescue until it
		// changes again.
		delete(r.last, key)
	}
}

// seen notes the bucket's entry for key at stream sequence seq, written at
// at, found by a look: put is false for a deletion or a purge.
func (r *Rescuer) seen(key string, seq uint64, at time.Time, put bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next = max(r.next, seq+1)
	if r.own.take(seq) {
		return // this process's own write, noted already
	}
	if m, ok := r.last[key]; ok && m.rev >= seq {
		return
	}
	if g, ok := r.gate[key]; ok && g >= seq {
		return
	}
	delete(r.gate, key) // changed: read again once quiet
	if !put {
		delete(r.last, key)
		return
	}
	// The entry's own time, so a sagad that starts does not wait After
	// again for capsules that were quiet already.
	r.last[key] = mark{at: at, rev: seq}
}

// seqSet is a set of stream sequences from base on, a bit each: the
// revisions this process wrote since the last look, at a few kilobytes a
// look however many capsules that is.
type seqSet struct {
	base  uint64 // the sequence of words[0]'s first bit
	words []uint64
}

// maxSeqWords bounds a seqSet (8 Mi sequences, 1 MiB): while looks fail,
// later writes go unrecorded, and the look reads those capsules once
// instead.
const maxSeqWords = 1 << 17

func (s *seqSet) add(seq uint64) {
	if seq < s.base {
		return
	}
	i := (seq - s.base) / 64
	if i >= maxSeqWords {
		return
	}
	for uint64(len(s.words)) <= i {
		s.words = append(s.words, 0)
	}
	s.words[i] |= 1 << ((seq - s.base) % 64)
}

// take removes seq and reports whether it was there.
func (s *seqSet) take(seq uint64) bool {
	if seq < s.base {
		return false
	}
	i := (seq - s.base) / 64
	if i >= uint64(len(s.words)) {
		return false
	}
	bit := uint64(1) << ((seq - s.base) % 64)
	had := s.words[i]&bit != 0
	s.words[i] &^= bit
	return had
}

// forgetBelow drops the sequences below next, which a look has passed.
func (s *seqSet) forgetBelow(next uint64) {
	if next <= s.base {
		return
	}
	k := (next - s.base) / 64
	if k >= uint64(len(s.words)) {
		s.words = s.words[:0]
	} else {
		s.words = s.words[:copy(s.words, s.words[k:])]
	}
	s.base += k * 64
	if len(s.words) > 0 && next > s.base {
		s.words[0] &^= 1<<(next-s.base) - 1
	}
}

// look reads, headers only, the bucket's entries from where the last look
// stopped to its end, notes each, and returns how many it read.
func (r *Rescuer) look(ctx context.Context) (int, error) {
	r.mu.Lock()
	from := r.next
	r.mu.Unlock()
	n, err := r.st.Checkpoints.Scan(ctx, from, r.seen)
	if errors.Is(err, store.ErrScanRewound) {
		r.rewound()
		n, err = r.st.Checkpoints.Scan(ctx, 1, r.seen)
	}
	r.mu.Lock()
	r.own.forgetBelow(r.next)
	r.mu.Unlock()
	return n, err
}

// rewound starts the looks again from the bucket's first sequence, its
// sequences having gone back: the revisions noted are of the old
// numbering, and would make every later write look older than them.
func (r *Rescuer) rewound() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log.Warn("rescue: the checkpoint bucket's sequences went back; looking at it again from the first")
	r.next, r.own = 1, seqSet{base: 1}
	for k, m := range r.last {
		r.last[k] = mark{at: m.at}
	}
	for k := range r.gate {
		r.gate[k] = 0
	}
}

// Rescue looks once at the capsules whose checkpoints have been quiet for
// longer than After (at most MaxChecks of them) and sends the step of each
// one still in progress with nothing queued for its phase.
func (r *Rescuer) Rescue(ctx context.Context) {
	defer r.countGate()
	now := r.cfg.Now()
	r.mu.Lock()
	var quiet []string
	seenAt := map[string]uint64{}
	for k, m := range r.last {
		if now.Sub(m.at) > r.cfg.After {
			quiet = append(quiet, k)
			seenAt[k] = m.rev
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
		cp, rev, err := r.st.Checkpoints.GetLatest(ctx, key, nil)
		if r.st.Checkpoints.Corrupt.Report(err, "not rescued: a message about the capsule halts it") {
			// A value sagad did not write reads the same next time: looking
			// again every pass would only crowd out the capsules that can
			// be rescued (MaxChecks).
			r.mu.Lock()
			delete(r.last, key)
			r.mu.Unlock()
			continue
		}
		if errors.Is(err, store.ErrNotFound) {
			// Gone (expired, its marker, which lives a second, missed by
			// the looks): nothing to rescue, and nothing a later look
			// would forget it by.
			r.mu.Lock()
			if m, ok := r.last[key]; ok && m.rev == seenAt[key] {
				delete(r.last, key)
			}
			r.mu.Unlock()
			continue
		}
		if err != nil {
			continue // try again next time
		}
		st := cp.State
		if st.Status != capsule.InProgress {
			// Ended, or parked (the sweeper's): forget it until its
			// checkpoint changes again.
			r.forget(key, cp, rev)
			continue
		}
		if now.Sub(cp.UpdatedAt) <= r.cfg.After {
			continue // it moved meanwhile: look again later
		}
		ph := st.Phase
		empty := true
		for q := ph; q <= deferredUpTo(ph) && empty; q++ {
			e, seen := idle[q]
			if !seen {
				e = r.phaseIdle(ctx, q)
				idle[q] = e
			}
			empty = e
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
			r.again(key, now)
			continue
		}
		r.cfg.Metrics.Rescued(ph)
		r.log.Warn("capsule rescued: its step had no message, sent again", "capsule_id", cp.CapsuleID, "key", key,
			"phase", ph.String(), "cycle", st.Cycle, "trace_id", cp.TraceID, "quiet_for", now.Sub(cp.UpdatedAt).Round(time.Second))
		r.again(key, now) // give the step its time before looking again
	}
}

// again times key from now, unless its checkpoint changed meanwhile.
func (r *Rescuer) again(key string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m, ok := r.last[key]; ok && m.at.Before(now) {
		r.last[key] = mark{at: now, rev: m.rev}
	}
}

// forget drops key, a capsule no longer in progress read at revision rev,
// unless a later change was noted meanwhile.
func (r *Rescuer) forget(key string, cp *capsule.Checkpoint, rev uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m, ok := r.last[key]; ok && m.rev <= rev {
		delete(r.last, key)
		if cp.State.Status == capsule.WaitingForOperator {
			r.gate[key] = rev
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

// deferredUpTo is the last phase whose queue may hold the message of a
// capsule whose checkpoint stands at ph: REALITY_ANCHOR, PLANNING and
// AUTOMATED_GATES may defer their advance to a later phase's write
// (package pipeline), so the capsule's message may wait at any phase up to
// EXECUTION meanwhile.
func deferredUpTo(ph capsule.Phase) capsule.Phase {
	if ph == capsule.RealityAnchor || ph == capsule.Planning || ph == capsule.AutomatedGates {
		return capsule.Execution
	}
	return ph
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
