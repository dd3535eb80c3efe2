package pipeline

import (
	"time"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/phases"
)

// A deferred advance is applied to the checkpoint once by the phase that
// defers it (deferrable), and again by the catch-up of every phase after
// it until one writes: REALITY_ANCHOR's four times, PLANNING's three,
// AUTOMATED_GATES' twice, each a machine.Apply that copies the checkpoint
// and, since the first one took the history's free slot, its history too
// (history.go). machine.Apply is pure and deterministic, and a checkpoint
// is never changed in place (every change is made on a copy): the same
// plain advance of the same checkpoint object at the same instant is the
// same result. So the first one is kept here, and the others take it.

// advanceCap is how many applied advances the memo holds at most: each
// capsule between REALITY_ANCHOR and EXECUTION holds three, and the one
// that writes takes them; an entry is evicted (the oldest first) only from
// a capsule whose catch-up this process will not run, or for one with more
// in flight than this, whose catch-up then applies its advances itself.
const advanceCap = 1024

// advanceKey is what a plain advance's result is a function of: the
// checkpoint object it is applied to (the key holds it, so the address is
// not reused while the entry lives), the phase, the cycle, and the instant
// (machine.Apply reads only the instant of its time: it takes it in UTC).
type advanceKey struct {
	from  *capsule.Checkpoint
	phase capsule.Phase
	cycle int
	sec   int64
	nsec  int32
}

// advanceMemo is the plain advances this process applied and that a
// catch-up is still to apply.
type advanceMemo = boundedMemo[advanceKey, machine.Result]

// newAdvanceMemo returns an empty memo, or nil (every advance is applied)
// when off.
func newAdvanceMemo(off bool) *advanceMemo {
	return newBoundedMemo[advanceKey, machine.Result](advanceCap, off)
}

// applyMode says how applyDecision uses the memo.
type applyMode int

const (
	// applyFresh: the deferring phase's own decision, just taken (at its
	// own time): nothing can be kept for it yet; keep it for the catch-ups.
	applyFresh applyMode = iota
	// applyShared: a catch-up that writes nothing (lazy): take a kept
	// result and leave it for the catch-ups to come, or keep its own.
	applyShared
	// applyTaken: the catch-up of the phase that writes: take a kept
	// result and forget it.
	applyTaken
)

// applyDecision is machine.Apply(cp, machine.Decide{Phase: ph, Cycle:
// cycle, Decision: d}, at), as deferrable and the catch-up apply a phase's
// decision: a plain advance (plainAdvance) this process applied already is
// taken from the memo, and one it applies is kept for the catch-ups to
// come, as mode says.
func (p *Pipeline) applyDecision(cp *capsule.Checkpoint, ph capsule.Phase, cycle int, d phases.Decision, at time.Time, mode applyMode) (machine.Result, error) {
	m := p.advances
	if m == nil || !plainAdvance(d) {
		return machine.Apply(cp, machine.Decide{Phase: ph, Cycle: cycle, Decision: d}, at)
	}
	k := advanceKey{from: cp, phase: ph, cycle: cycle, sec: at.Unix(), nsec: int32(at.Nanosecond())}
	if mode != applyFresh {
		if res, ok := m.get(k, mode == applyTaken); ok {
			return res, nil
		}
	}
	res, err := machine.Apply(cp, machine.Decide{Phase: ph, Cycle: cycle, Decision: d}, at)
	if err == nil && mode != applyTaken {
		m.put(k, res)
	}
	return res, err
}
