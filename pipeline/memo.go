package pipeline

import (
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/phases"
)

// memoCap is how many deferred decisions the memo holds at most: far more
// than a process has between its deferring phases and the catch-up (each
// capsule in flight there holds two, and sagabench keeps 200 in flight),
// so an entry is evicted only from a capsule whose catch-up this process
// will not run (its message went to another sagad, or its capsule was
// paused or ended first).
const memoCap = 4096

// memoKey is what a deferred decision of PLANNING, or of AUTOMATED_GATES
// deciding from the bytes alone (gatesPure), is a function of, besides the
// constitution's settings (fixed for the process's life) and the clock
// (see decisionMemo): the capsule key, the bytes (the checkpoint's digest,
// which deferrable and decideDeferred both require the bytes' SHA-256 to
// equal), the checkpoint's KV revision the decision was taken on (the
// same revision is the same checkpoint: nothing was written in between),
// the run, the cycle and the phase.
type memoKey struct {
	key    string
	digest string
	rev    uint64
	run    int
	cycle  int
	phase  capsule.Phase
}

// decisionMemo is this process's memo of the deferred advances it made:
// a phase that defers its advance (deferAdvance) notes it, and the catch-up
// of the phase that writes it (decideDeferred) takes the note instead of
// running the phase again, when the key is the same, that is when it
// starts from the very checkpoint the decision was taken on. Only plain
// advances are deferred (deferrable), so a note holds no decision: its
// presence is the decision (plainAdvance). Another process's memo is not
// this one's: its catch-up finds nothing and runs the phase, as before.
//
// What else those phases read is the same at the catch-up: of the
// checkpoint, only its key (Rule 2, ownedID); so what the catch-up decided
// before them (REALITY_ANCHOR's advance, assumed when the note was put,
// decided with a read at the catch-up) cannot change their decision, only
// stop the catch-up before them. The constitution's settings are the
// process's for its whole life.
//
// The clock: a phase's decision taken later could differ only by the time
// it is taken at (no rule reads it today: rules.Input.Now). The memo gives
// the decision as taken when the deferring phase ran, which is the time
// its transition is recorded at (deferredAt), and what NoDefer would have
// written then.
//
// It is bounded (memoCap, the oldest note evicted first) and a note is
// removed when taken (boundedMemo): a catch-up that does not write what it
// took (it lost a race, or the message is redelivered) runs the phase the
// next time.
type decisionMemo = boundedMemo[memoKey, struct{}]

// newDecisionMemo returns an empty memo, or nil (no memo: every catch-up
// runs its phases) when off.
func newDecisionMemo(off bool) *decisionMemo { return newBoundedMemo[memoKey, struct{}](memoCap, off) }

// memoizable reports whether decisions of phase ph go into the memo:
// REALITY_ANCHOR's do not, its catch-up reads its target where it is.
func memoizable(ph capsule.Phase) bool {
	return ph == capsule.Planning || ph == capsule.AutomatedGates
}

// plainAdvance reports whether d is an advance and nothing else, the one
// decision the memo replays (phases.AdvanceWith()). A field added to
// phases.Decision must be added here (TestPlainAdvanceCoversDecision).
func plainAdvance(d phases.Decision) bool {
	return d.Action == phases.Advance && d.Halt.IsZero() && len(d.Findings) == 0 && d.Delay == 0 && d.Err == nil &&
		d.Record == nil && d.Trigger == "" && d.Reason == "" && !d.Wait && len(d.WaitFor) == 0
}
