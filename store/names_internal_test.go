package store

import (
	"fmt"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/differential"
)

// phaseSubjectPair: the subjects read from the table are the ones
// fmt.Sprintf made (the intake subject for RECEPTION), for every phase and
// for numbers that are none.
var phaseSubjectPair = differential.Pair[capsule.Phase, string]{
	Name: "PhaseSubject",
	Fast: func(p capsule.Phase) (string, error) { return PhaseSubject(p), nil },
	Reference: func(p capsule.Phase) (string, error) {
		if p == capsule.Reception {
			return IntakeSubject, nil
		}
		return fmt.Sprintf("saga.phase.%d", p), nil
	},
	Seeds: func() (out []capsule.Phase) {
		for p := capsule.Phase(-3); p < capsule.NumPhases+3; p++ {
			out = append(out, p)
		}
		return out
	}(),
}
