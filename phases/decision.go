package phases

import (
	"time"

	"github.com/sagad/sagad/capsule"
)

// Action is what the pipeline does with a capsule after a phase.
type Action int

// Actions a phase can decide.
const (
	// Advance moves the capsule to the next phase (HANDOFF completes it).
	Advance Action = iota + 1
	// LoopBack sends the capsule back to EXECUTION for a new cycle (Rule 12).
	LoopBack
	// Halt ends the capsule with Decision.Halt.
	Halt
	// Retry leaves the checkpoint untouched and redelivers after Decision.Delay.
	Retry
	// Park pauses the capsule where it is, before the phase's transition,
	// with Decision.Trigger (a continuation is written). Resume runs the phase again.
	Park
)

// Decision is a phase's verdict on one capsule.
type Decision struct {
	Action Action
	// Halt is the reason when Action is Halt.
	Halt capsule.HaltReason
	// Findings are recorded in the checkpoint (rule findings, review findings).
	Findings []capsule.Finding
	// Delay is how long to wait before a Retry.
	Delay time.Duration
	// Err explains a Retry (logged, never shown as a halt).
	Err error
	// Mutate, when set, changes the checkpoint state as part of the same
	// compare-and-set that records the transition (an executor result, a review).
	Mutate func(st *capsule.CheckpointState)
	// Trigger and Reason say why the capsule parks: with Park, before the
	// transition; with Advance or LoopBack, right after it (a warning that
	// fires once the phase's work is recorded).
	Trigger capsule.Trigger
	Reason  string
	// Wait, with Advance from REVIEW, parks the capsule in
	// waiting_for_operator before HANDOFF (review.operator_gate).
	Wait bool
}

// ParkWith returns a Park decision.
func ParkWith(t capsule.Trigger, reason string) Decision {
	return Decision{Action: Park, Trigger: t, Reason: reason}
}

// AdvanceWith returns an Advance decision carrying findings.
func AdvanceWith(findings ...capsule.Finding) Decision {
	return Decision{Action: Advance, Findings: findings}
}

// HaltWith returns a Halt decision.
func HaltWith(r capsule.HaltReason, findings ...capsule.Finding) Decision {
	return Decision{Action: Halt, Halt: r, Findings: findings}
}

// RetryAfter returns a Retry decision.
func RetryAfter(d time.Duration, err error) Decision {
	return Decision{Action: Retry, Delay: d, Err: err}
}
