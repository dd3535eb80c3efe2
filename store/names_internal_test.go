package store

import (
	"fmt"
	"testing"

	"github.com/sagad/sagad/capsule"
)

// TestPhaseSubjectAsSprintf: the subjects read from the table are the ones
// fmt.Sprintf made, for every phase and for numbers that are none.
func TestPhaseSubjectAsSprintf(t *testing.T) {
	t.Parallel()
	for p := capsule.Phase(-3); p < capsule.NumPhases+3; p++ {
		want := fmt.Sprintf("saga.phase.%d", p)
		if p == capsule.Reception {
			want = IntakeSubject
		}
		if got := PhaseSubject(p); got != want {
			t.Fatalf("PhaseSubject(%d) = %q, want %q", p, got, want)
		}
	}
}
