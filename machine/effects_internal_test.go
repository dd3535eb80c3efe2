package machine

import (
	"math/rand/v2"
	"testing"

	"github.com/sagad/sagad/capsule"
)

// TestPositionIsTheGeneralOne holds the shared positions to the position
// they stand for, inside the table and past its edges.
func TestPositionIsTheGeneralOne(t *testing.T) {
	for ph := capsule.Phase(-2); ph < capsule.NumPhases+2; ph++ {
		for cycle := -2; cycle < tabledCycles+4; cycle++ {
			if got, want := *position(ph, cycle), (Position{Phase: ph, Cycle: cycle}); got != want {
				t.Fatalf("position(%v, %d) = %+v, want %+v", ph, cycle, got, want)
			}
		}
	}
}

// TestEffectsOfNextAsAllocated holds EffectsOf's next position to the one it
// allocated before the table, over random checkpoints and transitions.
func TestEffectsOfNextAsAllocated(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	outcomes := []string{capsule.OutcomePassed, capsule.OutcomeLoopedBack, capsule.OutcomeCompleted, capsule.OutcomeHalted, capsule.OutcomeCancelled}
	states := []capsule.State{capsule.InProgress, capsule.Paused, capsule.Completed, capsule.Halted}
	for range 40000 {
		tr := capsule.Transition{Phase: capsule.Phase(r.IntN(capsule.NumPhases)), Cycle: r.IntN(tabledCycles + 4), Outcome: outcomes[r.IntN(len(outcomes))]}
		cp := &capsule.Checkpoint{State: capsule.CheckpointState{Status: states[r.IntN(len(states))], Phase: capsule.Phase(r.IntN(capsule.NumPhases)), Cycle: r.IntN(tabledCycles + 4)}}
		if r.IntN(2) == 0 {
			// Half of them where the transition leads, so Next is set often.
			if np, nc, ok := Next(tr); ok {
				cp.State.Status, cp.State.Phase, cp.State.Cycle = capsule.InProgress, np, nc
			}
		}
		var want *Position
		if np, nc, ok := Next(tr); ok && cp.State.Status == capsule.InProgress && cp.State.Phase == np && cp.State.Cycle == nc {
			want = &Position{Phase: np, Cycle: nc}
		}
		got := EffectsOf(cp, &tr).Next
		if (got == nil) != (want == nil) || (got != nil && *got != *want) {
			t.Fatalf("EffectsOf(%+v, %+v).Next = %v, want %v", cp.State, tr, got, want)
		}
	}
}

// TestEffectsOfAllocatesNothing: a transition within the table costs no
// allocation for its next position.
func TestEffectsOfAllocatesNothing(t *testing.T) {
	tr := capsule.Transition{Phase: capsule.Planning, Cycle: 0, Outcome: capsule.OutcomePassed}
	cp := &capsule.Checkpoint{State: capsule.CheckpointState{Status: capsule.InProgress, Phase: capsule.AutomatedGates}}
	var fx Effects
	if n := testing.AllocsPerRun(100, func() { fx = EffectsOf(cp, &tr) }); n != 0 || fx.Next == nil {
		t.Fatalf("EffectsOf: %v allocations, next %v", n, fx.Next)
	}
}

// BenchmarkEffectsOf derives the effects of a transition that goes on.
func BenchmarkEffectsOf(b *testing.B) {
	tr := capsule.Transition{Phase: capsule.Execution, Cycle: 1, Outcome: capsule.OutcomePassed}
	cp := &capsule.Checkpoint{State: capsule.CheckpointState{Status: capsule.InProgress, Phase: capsule.ReviewPhase, Cycle: 1}}
	b.ReportAllocs()
	var fx Effects
	for b.Loop() {
		fx = EffectsOf(cp, &tr)
	}
	_ = fx
}
