package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/phases"
	"github.com/sagad/sagad/runner"
	"github.com/sagad/sagad/store"
)

// Deferred advances (issue 36). PLANNING's decision is a function of the
// capsule's bytes alone, which the checkpoint names by digest, and so is
// AUTOMATED_GATES' for most capsules (gatesPure): rewriting the checkpoint
// only to say "it passed" cost every capsule a sequential compare-and-set
// each. So such a phase, when it advances, writes nothing: it sends the
// next phase's message naming the deferred phases (store.HeaderDeferred),
// and the phase receiving it decides them again on the checkpoint
// (catchUp) and writes every transition with its own first write
// (EXECUTION's claim, or AUTOMATED_GATES' decision). What holds:
//
//   - The phase still consumes its message: a paused phase (its consumer
//     paused) holds the capsule as before, and a capsule paused by a person
//     is in no state a deferred phase is caught up from (catchUp requires
//     it in progress at that phase), so its message is dropped; the first
//     write (a compare-and-set on the revision read) proves the checkpoint
//     was current, as it does for any phase started from the cache.
//   - Nothing is taken from the message: the receiving phase computes each
//     deferred decision itself, or takes it from what this process decided
//     on the very same checkpoint revision (memo.go). A forged header can
//     only make it compute what the deferring phase would have.
//   - A crash anywhere resumes from what was written: before the merged
//     write, the checkpoint still stands at PLANNING and the message that
//     names it is redelivered (or the rescuer sends PLANNING's again); the
//     history entry of the deferred phase appears with the merged write.
//   - Until then the checkpoint (status, history) shows the capsule at the
//     last phase written. So an advance into a phase this process knows
//     is paused (pauseView) is written, not deferred: a capsule queued at
//     a paused EXECUTION shows EXECUTION. Only a pause made while the
//     message was already on its way (or not seen yet) shows the phase
//     before, as every capsule did before the view.

// deferrable reports whether this attempt may defer decision d, taken at,
// rather than write it: a plain advance, on the first run's bytes as the
// checkpoint names them, of PLANNING, or of AUTOMATED_GATES when nothing
// but the capsule's bytes decided it (gatesPure). catchUp decides it again
// on the same bytes. next is the checkpoint the advance leads to (its
// phase and cycle address the next message); it is not written.
func (r *run) deferrable(d phases.Decision, at time.Time) (next *capsule.Checkpoint, ok bool) {
	if d.Action != phases.Advance || r.p.cfg.NoDefer || len(d.Findings) > 0 || d.Record != nil || d.Trigger != "" || d.Wait {
		return nil, false
	}
	cp := r.t.view()
	if cp.Run > 1 || cp.Digest == "" || r.c.Integrity.SHA256 != cp.Digest || cp.State.Status != capsule.InProgress {
		return nil, false
	}
	switch {
	case r.ph == capsule.RealityAnchor, r.ph == capsule.Planning:
	case r.ph == capsule.AutomatedGates && gatesPure(cp, r.c):
	default:
		return nil, false
	}
	res, err := r.p.applyDecision(cp, r.ph, r.cycle, d, at, applyFresh)
	if err != nil || res.Transition == nil || res.Checkpoint.State.Status != capsule.InProgress {
		return nil, false
	}
	if r.p.pauses.isPaused(res.Checkpoint.State.Phase) {
		// The capsule will wait there: written, status shows where.
		return nil, false
	}
	return res.Checkpoint, true
}

// forwardable reports whether REALITY_ANCHOR may send PLANNING's message
// without deciding at all (a deferrable advance, decided undecided): the
// phase that writes first decides it then (catchUp), and that phase's
// reads of the context refs and the target are the only ones. A capsule
// whose deadline warning is due is decided here, as before.
func (r *run) forwardable(at time.Time) (next *capsule.Checkpoint, ok bool) {
	if r.ph != capsule.RealityAnchor || r.eager {
		return nil, false
	}
	if _, warn := r.p.deadlineWarning(r.t.view(), r.c, at); warn {
		return nil, false
	}
	return r.deferrable(phases.AdvanceWith(), at)
}

// lazy reports whether this attempt's catch-up may assume REALITY_ANCHOR's
// deferred advance rather than decide it: the attempt is of a phase that
// defers its own advance when it makes one (PLANNING, or AUTOMATED_GATES
// deciding from the bytes alone) into a phase not known paused, so it
// writes nothing and the phase that will write decides REALITY_ANCHOR
// then. Were it to write after all, it decides again eagerly (attempt).
func (r *run) lazy(cp *capsule.Checkpoint) bool {
	if r.eager || r.p.cfg.NoDefer || r.p.pauses.isPaused(r.ph+1) {
		return false
	}
	return r.ph == capsule.Planning || (r.ph == capsule.AutomatedGates && gatesPure(cp, r.c))
}

// gatesPure reports whether AUTOMATED_GATES decides capsule c of
// checkpoint cp from the bytes alone, writing and reading nothing: no
// dependencies to look up, no wave or delegation tree to reserve in, no
// composition step (its operator gate), and the capsule under its own id
// (Rule 2 then needs no lookup). Its rules are pure functions of the bytes,
// the constitution's settings and the clock.
func gatesPure(cp *capsule.Checkpoint, c *capsule.Capsule) bool {
	return len(c.DependsOn) == 0 && c.WaveID == "" && c.Chain == nil && cp.Parent == "" && c.ParentCapsuleID == "" && cp.Key == c.CapsuleID
}

// deferAdvance sends the message of next, the checkpoint this phase's
// advance d (decided at) leads to, naming the advance, and acknowledges
// this one: nothing is written.
//
// The plain advances it hands on are noted in the process's memo first:
// the catch-up, which may run as soon as the message is out, then finds
// them (a note of a message that is never sent is evicted in time).
func (r *run) deferAdvance(ctx context.Context, next *capsule.Checkpoint, d phases.Decision, at time.Time) runner.Delivery {
	r.memoize(d)
	// On the stack for the deferrable phases (three at most): the list
	// only becomes the message's header text.
	var buf [3]store.Deferred
	deferred := append(append(buf[:0], r.deferred...), store.Deferred{Phase: r.ph, At: at})
	if err := r.p.st.SendDeferred(ctx, next, deferred); err != nil {
		return runner.Retry(err)
	}
	return runner.Ack()
}

// catchUp decides again, on the checkpoint this attempt holds, every phase
// the message says was deferred while the checkpoint stands in progress at
// it, and holds the result for the attempt to write with its first write
// (the cache keeps what is written only). A phase whose decision now is not
// an advance ends the catching up there: the attempt then writes what it
// came to (writeCaughtUp). Advances that do not lead to the message's
// phase and cycle are not this message's to write: nothing is caught up.
func (t *txn) catchUp(ctx context.Context) error {
	r := t.run
	if r == nil || len(r.deferred) == 0 {
		return nil
	}
	t.mu.Lock()
	base, rev := t.cp, t.rev
	t.mu.Unlock()
	lazy := r.lazy(base)
	c, err := r.decideDeferred(ctx, base, rev, lazy)
	if err != nil {
		return err
	}
	if c.assumed && !machine.Running(c.cp, r.ph, r.cycle) {
		// An assumed advance that does not lead here is not this attempt's
		// to act on: decide them all.
		if c, err = r.decideDeferred(ctx, base, rev, false); err != nil {
			return err
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(c.merged) > 0 {
		t.cp = c.cp
	}
	t.merged = c.merged
	t.assumed = c.assumed && len(c.merged) > 0
	t.known = c.known
	return nil
}

// isAssumed reports whether the checkpoint this attempt holds carries
// REALITY_ANCHOR's advance assumed, not decided (lazy).
func (t *txn) isAssumed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.assumed
}

// caught is what decideDeferred came to: the checkpoint the deferred
// phases lead to and their transitions; assumed, whether REALITY_ANCHOR's
// advance was assumed (lazy); known, the memoizable phases (a bit each)
// whose plain advance it decided or took from the memo, on the revision
// it started from, for a deferral of this attempt's own to note again.
type caught struct {
	cp      *capsule.Checkpoint
	merged  []capsule.Transition
	assumed bool
	known   uint8
}

// decideDeferred decides again, from cp (at KV revision rev), the deferred
// phases catchUp catches up. lazy assumes REALITY_ANCHOR's advance instead
// of deciding it (assumed); an advance this process deferred on this very
// revision is taken from the memo rather than decided again (memoized).
func (r *run) decideDeferred(ctx context.Context, cp *capsule.Checkpoint, rev uint64, lazy bool) (caught, error) {
	c := caught{cp: cp}
	// One clock reading bounds every deferred decision's time: the catch-up
	// is one moment, and the clock is slow to read (a reading a phase was
	// most of deferredAt).
	var now time.Time
	mode := applyTaken
	if lazy {
		mode = applyShared
	}
	for _, d := range r.deferred {
		st := c.cp.State
		if d.Phase >= r.ph || st.Status != capsule.InProgress || st.Phase != d.Phase ||
			c.cp.Run > 1 || c.cp.Digest == "" || r.c.Integrity.SHA256 != c.cp.Digest {
			continue
		}
		var dec phases.Decision
		switch {
		case lazy && d.Phase == capsule.RealityAnchor:
			dec, c.assumed = phases.AdvanceWith(), true
		case r.memoized(c.cp, rev, d.Phase):
			dec = phases.AdvanceWith()
		default:
			in := phases.Input{Capsule: r.c, Raw: r.raw, Checkpoint: c.cp}
			dec = r.p.phases[d.Phase].Run(ctx, r.p.env, &in)
			r.p.caughtUp[d.Phase].Add(1)
		}
		if dec.Action == phases.Retry {
			return caught{}, fmt.Errorf("deferred %s: %w", d.Phase, dec.Err)
		}
		if now.IsZero() {
			now = r.p.cfg.Now()
		}
		res, err := r.p.applyDecision(c.cp, d.Phase, st.Cycle, dec, deferredAt(now, c.cp, d.At), mode)
		if err != nil || res.Transition == nil {
			break // the machine refuses it: the checkpoint decides
		}
		c.cp = res.Checkpoint
		if c.merged == nil {
			// Room for them all: one allocation, not one per append.
			c.merged = make([]capsule.Transition, 0, len(r.deferred))
		}
		c.merged = append(c.merged, *res.Transition)
		if memoizable(d.Phase) && plainAdvance(dec) {
			c.known |= 1 << d.Phase
		}
		if dec.Action != phases.Advance {
			break
		}
	}
	if st := c.cp.State; len(c.merged) > 0 && st.Status == capsule.InProgress && (st.Phase != r.ph || st.Cycle != r.cycle) {
		c.merged, c.known = nil, 0
	}
	return c, nil
}

// memoized reports whether this process deferred phase ph's plain advance
// on checkpoint cp as it stood at revision rev (the catch-up's starting
// point, which cp, caught up so far, leads on from), taking the note.
func (r *run) memoized(cp *capsule.Checkpoint, rev uint64, ph capsule.Phase) bool {
	return memoizable(ph) && r.p.memo.take(memoKey{key: r.t.key, digest: cp.Digest, rev: rev, run: cp.Run, cycle: cp.State.Cycle, phase: ph})
}

// memoize notes in the process's memo the plain advances this deferring
// attempt hands on: its own decision d and those its catch-up decided (or
// took from the memo), all on the revision it started from.
func (r *run) memoize(d phases.Decision) {
	t := r.t
	if r.p.memo == nil {
		return
	}
	t.mu.Lock()
	cp, rev, known := t.cp, t.rev, t.known
	t.mu.Unlock()
	if memoizable(r.ph) && plainAdvance(d) {
		known |= 1 << r.ph
	}
	for ph := capsule.Planning; ph <= capsule.AutomatedGates; ph++ {
		if known&(1<<ph) != 0 {
			r.p.memo.put(memoKey{key: t.key, digest: cp.Digest, rev: rev, run: cp.Run, cycle: r.cycle, phase: ph}, struct{}{})
		}
	}
}

// deferredAt is the time a deferred decision is recorded at: when the
// deferring phase decided, as its message says, within what the checkpoint
// and the clock (now, the catch-up's reading) allow (a message is never
// trusted).
func deferredAt(now time.Time, cp *capsule.Checkpoint, at time.Time) time.Time {
	if at.After(now) {
		return now
	}
	if at.Before(cp.UpdatedAt) {
		return cp.UpdatedAt
	}
	return at
}

// landed logs and counts the deferred transitions a write just recorded.
func (t *txn) landed(cp *capsule.Checkpoint) {
	t.mu.Lock()
	merged := t.merged
	t.merged = nil
	t.mu.Unlock()
	if len(merged) == 0 {
		return
	}
	trace := traceIDOf(cp)
	for _, tr := range merged {
		t.p.logTransition(cp, tr, 0)
		t.p.metrics.TransitionTraced(tr.Phase, tr.Outcome, 0, trace)
	}
}

// writeCaughtUp writes a checkpoint catchUp brought to a phase other than
// the message's (a deferred decision that no longer advances) and emits
// its effects. ok false: nothing was caught up.
func (r *run) writeCaughtUp(ctx context.Context) (runner.Delivery, bool) {
	t := r.t
	t.mu.Lock()
	cp, rev, merged := t.cp, t.rev, t.merged
	t.mu.Unlock()
	if len(merged) == 0 {
		return runner.Delivery{}, false
	}
	newRev, err := r.p.st.WriteCaughtUp(ctx, cp, rev)
	if err != nil {
		return runner.Retry(fmt.Errorf("write deferred transitions: %w", err)), true
	}
	t.set(cp, newRev)
	t.landed(cp)
	tr := merged[len(merged)-1]
	if err := r.p.st.Emit(ctx, cp, newRev, &tr, r.raw, r.c.Constraints.ResourceLocksRequired); err != nil {
		return runner.Retry(err), true
	}
	return runner.Ack(), true
}
