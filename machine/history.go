package machine

import (
	"sync"

	"github.com/sagad/sagad/capsule"
)

// A checkpoint's history grows by one transition at a time, 7 to 9 times a
// capsule, and Apply works on a copy of the checkpoint that shares its
// history's array. Copying the whole history at every append was 1.5 % of
// sagad's allocated bytes; instead the array is made with room for the
// phases still to come, and a transition is written into the room when it is
// free.
//
// Two checkpoints can share an array and both be appended to: Apply may be
// given the same checkpoint twice (a retried compare-and-set, a refused
// event then another, two goroutines holding the process's cached
// checkpoint). Whoever writes slot n of the array first owns it: a slot
// is claimed under historyClaims and only when it still holds the zero
// transition, and a claimed slot is never written again, so a history of
// length n+1 over an array is the only one that can have come from it and
// the others copy. A written transition is never the zero one (it has its
// time).
var historyClaims sync.Mutex

// record appends tr to cp's history and returns the appended entry, which
// is the history's own (callers only read it). A transition of a later run
// says which run it belongs to; it is stamped before it is written, as a
// written slot is not written again.
func record(cp *capsule.Checkpoint, tr capsule.Transition) *capsule.Transition {
	if tr.Run == 0 && cp.Run > 1 {
		tr.Run = cp.Run
	}
	cp.History = appendTransition(cp.History, tr)
	return &cp.History[len(cp.History)-1]
}

// appendTransition is append(h, tr) that never writes a slot another
// history over the same array may have: into h's room when its next slot
// is unclaimed, else into a new array with room for what is left to come.
func appendTransition(h []capsule.Transition, tr capsule.Transition) []capsule.Transition {
	n := len(h)
	if n < cap(h) && tr != (capsule.Transition{}) {
		historyClaims.Lock()
		slot := &h[:n+1][n]
		free := *slot == (capsule.Transition{})
		if free {
			*slot = tr
		}
		historyClaims.Unlock()
		if free {
			return h[:n+1]
		}
	}
	out := make([]capsule.Transition, n+1, n+1+transitionsAfter(tr))
	copy(out, h)
	out[n] = tr
	return out
}

// transitionsAfter is how many transitions a capsule usually records after
// tr: one per phase to come, and after a loop back EXECUTION and REVIEW
// again. A capsule that ends (or is replayed) has none.
func transitionsAfter(tr capsule.Transition) int {
	switch tr.Outcome {
	case capsule.OutcomePassed:
		return int(capsule.Handoff - tr.Phase)
	case capsule.OutcomeLoopedBack:
		return int(capsule.Handoff-capsule.Execution) + 1
	}
	return 0
}
