package capsule

import (
	"fmt"
	"strconv"
)

// Phase is one of the seven saga phases, numbered 0–6 (PIPELINE §3).
type Phase int

// The seven phases, in order.
const (
	Reception Phase = iota
	RealityAnchor
	Planning
	AutomatedGates
	Execution
	ReviewPhase
	Handoff
)

// NumPhases is the number of saga phases.
const NumPhases = 7

var phaseNames = [NumPhases]string{
	"RECEPTION", "REALITY_ANCHOR", "PLANNING", "AUTOMATED_GATES", "EXECUTION", "REVIEW", "HANDOFF",
}

// String returns the phase's name as written in PIPELINE §3, e.g. "REALITY_ANCHOR".
func (p Phase) String() string {
	if p.Valid() {
		return phaseNames[p]
	}
	return "PHASE_" + strconv.Itoa(int(p))
}

// Valid reports whether p is one of the seven phases.
func (p Phase) Valid() bool { return p >= 0 && p < NumPhases }

// Progress is the checkpoint progress percentage once phase p has completed.
func (p Phase) Progress() int {
	if !p.Valid() {
		return 0
	}
	return (int(p) + 1) * 100 / NumPhases
}

// ParsePhase accepts a phase number ("4") or name ("EXECUTION", any case).
func ParsePhase(s string) (Phase, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if p := Phase(n); p.Valid() {
			return p, nil
		}
		return 0, fmt.Errorf("phase %d out of range 0–6", n)
	}
	for i, name := range phaseNames {
		if equalFold(name, s) {
			return Phase(i), nil
		}
	}
	return 0, fmt.Errorf("unknown phase %q", s)
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// State is where a capsule stands as a whole (sagactl status "state").
type State string

// Capsule states. Completed, Halted and Cancelled are terminal.
const (
	InProgress         State = "in_progress"
	Paused             State = "paused"
	WaitingForOperator State = "waiting_for_operator"
	// Waiting: the capsule waits, before anything is spent, for what it
	// needs to go on (its dependencies to complete).
	Waiting   State = "waiting"
	Completed State = "completed"
	Halted    State = "halted"
	Cancelled State = "cancelled"
)

// Terminal reports whether no further transition can happen.
func (s State) Terminal() bool { return s == Completed || s == Halted || s == Cancelled }

// Valid reports whether s is one of the defined states.
func (s State) Valid() bool {
	switch s {
	case InProgress, Paused, WaitingForOperator, Waiting, Completed, Halted, Cancelled:
		return true
	}
	return false
}

// Verdict is a reviewer's answer.
type Verdict string

// Review verdicts.
const (
	Approved         Verdict = "APPROVED"
	ChangesRequested Verdict = "CHANGES_REQUESTED"
	Rejected         Verdict = "REJECTED"
)

// Valid reports whether v is one of the three verdicts.
func (v Verdict) Valid() bool { return v == Approved || v == ChangesRequested || v == Rejected }
