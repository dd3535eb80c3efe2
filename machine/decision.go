package machine

import (
	"time"

	"github.com/sagad/sagad/capsule"
)

// Action is what a phase decided for a capsule.
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
	// It is never applied: a retry records nothing.
	Retry
	// Park pauses the capsule where it is, before the phase's transition,
	// with Decision.Trigger (a continuation is written). Resume runs the phase again.
	Park
)

// String names the action for logs and errors.
func (a Action) String() string {
	switch a {
	case Advance:
		return "advance"
	case LoopBack:
		return "loop_back"
	case Halt:
		return "halt"
	case Retry:
		return "retry"
	case Park:
		return "park"
	}
	return "unknown"
}

// Decision is a phase's verdict on one capsule.
type Decision struct {
	Action Action
	// Halt is the reason when Action is Halt.
	Halt capsule.HaltReason
	// Findings are recorded in the checkpoint (rule findings, review findings).
	Findings []capsule.Finding
	// Delay is how long to wait before a Retry; zero leaves it to the
	// runner's configured retry delay.
	Delay time.Duration
	// Err explains a Retry (logged, never shown as a halt).
	Err error
	// Record is what the phase's work adds to the checkpoint in the same
	// compare-and-set that records the transition (an executor result, a
	// review, the budget used). Nil records nothing but the transition.
	Record *Record
	// Trigger and Reason say why the capsule parks: with Park, before the
	// transition; with Advance or LoopBack, right after it (a warning that
	// fires once the phase's work is recorded).
	Trigger capsule.Trigger
	Reason  string
	// Wait, with Advance from REVIEW, parks the capsule in
	// waiting_for_operator before HANDOFF (review.operator_gate).
	Wait bool
	// WaitFor, with Park and capsule.TriggerDependencies, are the
	// dependencies the capsule waits for, in state waiting; with
	// capsule.TriggerWaveCapacity, its wave.
	WaitFor []string
}

// Record is the data a phase's work adds to the checkpoint. It is data, not
// code, so the machine alone decides how a checkpoint changes.
type Record struct {
	// BudgetUsed, when set, is the capsule's total consumption after the
	// phase's agent call.
	BudgetUsed *capsule.Usage
	// Result is the executor result of the cycle: it is kept, its artifact
	// joins the artifact refs, and the capsule no longer awaits external work.
	Result *capsule.ExecutionResult
	// Review is the review of the cycle, appended once per cycle.
	Review *capsule.ReviewEntry
	// AwaitingCycle, when not zero, is the cycle whose result an executor
	// that accepted the work will deliver on the completion subject.
	AwaitingCycle int
	// AwaitingUntil is when that result is overdue (the endpoint's
	// completion_timeout after the acceptance); nil leaves it to the
	// daemon's default.
	AwaitingUntil *time.Time
	// AwaitingTokenHash is the SHA-256 (lowercase hex) of the completion
	// token the accepting call carried; with AwaitingCycle, it replaces any
	// earlier call's (a completion must carry the latest call's token).
	AwaitingTokenHash string
	// Warned is a warning trigger that fired and must not fire again.
	Warned capsule.Trigger
	// WaveReserved is what AUTOMATED_GATES reserved of the capsule's wave.
	WaveReserved *capsule.Usage
	// Attempt is a failed agent call the failure policy halts on: logged
	// with the halt, since no retry records it (capsule.LogAttempt).
	Attempt *capsule.FailedAttempt
}

// ApplyTo changes st as the record says. It is idempotent: applying a
// record twice changes st as applying it once.
func (r *Record) ApplyTo(st *capsule.CheckpointState) {
	if r == nil {
		return
	}
	if r.BudgetUsed != nil {
		st.BudgetUsed = *r.BudgetUsed
	}
	if r.Result != nil {
		res := *r.Result
		st.Result = &res
		if res.ArtifactRef != "" && !contains(st.ArtifactRefs, res.ArtifactRef) {
			st.ArtifactRefs = append(st.ArtifactRefs, res.ArtifactRef)
		}
		st.AwaitingCycle = 0
		st.AwaitingUntil = nil
		st.AwaitingTokenHash = ""
	}
	if r.Review != nil && !hasReview(st.Reviews, r.Review.Cycle) {
		rv := *r.Review
		rv.Findings = capsule.CapFindings(rv.Findings, capsule.MaxFindings)
		st.Reviews = append(st.Reviews, rv)
	}
	if r.AwaitingCycle != 0 {
		st.AwaitingCycle = r.AwaitingCycle
		st.AwaitingTokenHash = r.AwaitingTokenHash
		st.AwaitingUntil = nil
		if r.AwaitingUntil != nil {
			u := r.AwaitingUntil.UTC()
			st.AwaitingUntil = &u
		}
	}
	if r.Warned != "" && !st.HasWarned(r.Warned) {
		st.Warned = append(st.Warned, r.Warned)
	}
	if r.WaveReserved != nil {
		u := *r.WaveReserved
		st.WaveReserved = &u
	}
	if r.Attempt != nil {
		st.LogAttempt(*r.Attempt)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func hasReview(list []capsule.ReviewEntry, cycle int) bool {
	for _, r := range list {
		if r.Cycle == cycle {
			return true
		}
	}
	return false
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

// RetryLater returns a Retry decision redelivered after the runner's
// configured retry delay: a transient failure with no delay of its own.
func RetryLater(err error) Decision { return Decision{Action: Retry, Err: err} }
