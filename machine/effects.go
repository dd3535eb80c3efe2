package machine

import "github.com/sagad/sagad/capsule"

// Effects is what a stored checkpoint calls for in the world. It is derived
// from the checkpoint (and the transition that was just recorded, if any),
// so it can be derived again after a crash or a redelivery, and doing it
// twice is harmless: a second phase message finds its transition recorded,
// outcomes carry a de-duplication id, events a deterministic id.
type Effects struct {
	// Next is the phase message to send while the capsule goes on. It may
	// point at a position shared by every caller (see position): read it,
	// never change it.
	Next *Position
	// Outcome is the terminal state whose outcome message to send ("" none).
	Outcome capsule.State
	// Parked says the capsule parked: write its continuation (paused) and
	// its paused or waiting event.
	Parked bool
	// ReleaseLocks says the capsule's locks are to be released.
	ReleaseLocks bool
}

// EffectsOf derives the effects of checkpoint cp after transition tr (nil
// when none was recorded: a park, an operator's pause, a resume).
func EffectsOf(cp *capsule.Checkpoint, tr *capsule.Transition) Effects {
	var fx Effects
	st := cp.State
	if tr != nil {
		if np, ncycle, ok := Next(*tr); ok && st.Status == capsule.InProgress && st.Phase == np && st.Cycle == ncycle {
			fx.Next = position(np, ncycle)
		}
		if state, ok := TerminalState(*tr); ok {
			fx.Outcome = state
		}
	}
	fx.Parked = (st.Status == capsule.Paused || st.Status == capsule.WaitingForOperator || st.Status == capsule.Waiting) &&
		st.Pause != nil && st.Pause.ResumeToken == ""
	// A stale EXECUTION message of an earlier cycle must not release the
	// locks the current cycle holds.
	fx.ReleaseLocks = (tr != nil && tr.Phase == capsule.Execution && (st.Phase != capsule.Execution || st.Status.Terminal())) ||
		(tr == nil && st.Phase == capsule.Execution && st.Status == capsule.Paused && len(st.LocksHeld) == 0)
	return fx
}

// tabledCycles is how many cycles of each phase have a shared position:
// more than a capsule may run (capsule.MaxCycles), with room to spare.
const tabledCycles = 16

// positions holds every position a capsule goes on to within tabledCycles,
// read-only: a transition's next position is one of them rather than an
// allocation (two a transition, one in Apply's result and one in the emit).
var positions = func() (t [capsule.NumPhases][tabledCycles]Position) {
	for ph := range t {
		for cycle := range t[ph] {
			t[ph][cycle] = Position{Phase: capsule.Phase(ph), Cycle: cycle}
		}
	}
	return t
}()

// position is the position (ph, cycle): the shared one when tabled, a new
// one otherwise.
func position(ph capsule.Phase, cycle int) *Position {
	if ph >= 0 && int(ph) < capsule.NumPhases && cycle >= 0 && cycle < tabledCycles {
		return &positions[ph][cycle]
	}
	return &Position{Phase: ph, Cycle: cycle}
}

// Next is where a capsule goes after transition tr, if it goes on (the
// phase table: each phase to the next, AUTOMATED_GATES to EXECUTION's first
// cycle, a loop back to EXECUTION's next cycle).
func Next(tr capsule.Transition) (p capsule.Phase, cycle int, ok bool) {
	switch tr.Outcome {
	case capsule.OutcomePassed:
		if tr.Phase == capsule.AutomatedGates {
			return capsule.Execution, max(tr.Cycle, 1), true
		}
		if tr.Phase >= capsule.Handoff {
			return 0, 0, false
		}
		return tr.Phase + 1, tr.Cycle, true
	case capsule.OutcomeLoopedBack:
		return capsule.Execution, tr.Cycle + 1, true
	}
	return 0, 0, false
}

// TerminalState is the capsule state a terminal transition ends in.
func TerminalState(tr capsule.Transition) (capsule.State, bool) {
	switch tr.Outcome {
	case capsule.OutcomeCompleted:
		return capsule.Completed, true
	case capsule.OutcomeHalted:
		return capsule.Halted, true
	case capsule.OutcomeCancelled:
		return capsule.Cancelled, true
	}
	return "", false
}
