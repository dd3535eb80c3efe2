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
// capsule's bytes alone, which the checkpoint names by digest: rewriting
// the checkpoint only to say "PLANNING passed" cost every capsule a
// sequential compare-and-set. So PLANNING, when it advances, writes
// nothing: it sends AUTOMATED_GATES' message naming the deferred phase
// (store.HeaderDeferred), and the phase receiving it decides PLANNING again
// on the checkpoint (catchUp) and writes both transitions with its own
// first write. What holds:
//
//   - The phase still consumes its message: a paused phase (its consumer
//     paused) holds the capsule as before, and a capsule paused by a person
//     is in no state a deferred phase is caught up from (catchUp requires
//     it in progress at that phase and cycle), so its message is dropped.
//   - Nothing is taken from the message: the receiving phase computes each
//     deferred decision itself. A forged header can only make it compute
//     what the deferring phase would have.
//   - A crash anywhere resumes from what was written: before the merged
//     write, the checkpoint still stands at PLANNING and the message that
//     names it is redelivered (or the rescuer sends PLANNING's again); the
//     history entry of the deferred phase appears with the merged write.

// deferrable reports whether this attempt may defer decision d rather than
// write it: an advance of PLANNING on the first run's bytes, as the
// checkpoint names them (catchUp decides it again on the same bytes).
func (r *run) deferrable(d phases.Decision) bool {
	if r.ph != capsule.Planning || d.Action != phases.Advance || r.p.cfg.NoDefer {
		return false
	}
	cp := r.t.view()
	return cp.Run <= 1 && cp.Digest != "" && r.c.Integrity.SHA256 == cp.Digest && cp.State.Status == capsule.InProgress
}

// deferAdvance sends the next phase's message naming this phase's advance,
// decided at, and acknowledges this one: nothing is written.
func (r *run) deferAdvance(ctx context.Context, at time.Time) runner.Delivery {
	deferred := append(r.deferred[:len(r.deferred):len(r.deferred)], store.Deferred{Phase: r.ph, At: at})
	m := store.EncodeDeferredMsg(r.t.view(), r.ph+1, deferred)
	if err := r.p.st.PublishDeferred(ctx, m); err != nil {
		return runner.Retry(err)
	}
	return runner.Ack()
}

// catchUp decides again, on the checkpoint this attempt holds, every phase
// the message says was deferred while the checkpoint stands in progress at
// it in this cycle, and holds the result for the attempt to write with its
// first write (the cache keeps what is written only). A phase whose
// decision now is not an advance ends the catching up there: the attempt
// then writes what it came to (writeCaughtUp).
func (t *txn) catchUp(ctx context.Context) error {
	r := t.run
	if r == nil || len(r.deferred) == 0 {
		return nil
	}
	cp := t.view()
	var merged []capsule.Transition
	for _, d := range r.deferred {
		st := cp.State
		if d.Phase >= r.ph || st.Status != capsule.InProgress || st.Cycle != r.cycle || st.Phase != d.Phase ||
			cp.Run > 1 || cp.Digest == "" || r.c.Integrity.SHA256 != cp.Digest {
			continue
		}
		in := phases.Input{Capsule: r.c, Raw: r.raw, Checkpoint: cp}
		dec := r.p.phases[d.Phase].Run(ctx, r.p.env, &in)
		if dec.Action == phases.Retry {
			return fmt.Errorf("deferred %s: %w", d.Phase, dec.Err)
		}
		res, err := machine.Apply(cp, machine.Decide{Phase: d.Phase, Cycle: r.cycle, Decision: dec}, t.deferredAt(cp, d.At))
		if err != nil || res.Transition == nil {
			break // the machine refuses it: the checkpoint decides
		}
		cp = res.Checkpoint
		merged = append(merged, *res.Transition)
		if dec.Action != phases.Advance {
			break
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(merged) > 0 {
		t.cp = cp
	}
	t.merged = merged
	return nil
}

// deferredAt is the time a deferred decision is recorded at: when the
// deferring phase decided, as its message says, within what the checkpoint
// and the clock allow (a message is never trusted).
func (t *txn) deferredAt(cp *capsule.Checkpoint, at time.Time) time.Time {
	now := t.p.cfg.Now()
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
	for _, tr := range merged {
		t.p.logTransition(cp, tr, 0)
		t.p.metrics.TransitionTraced(tr.Phase, tr.Outcome, 0, traceIDOf(cp))
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
	newRev, err := r.p.st.Checkpoints.Update(ctx, cp, rev)
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
