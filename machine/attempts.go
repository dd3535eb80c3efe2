package machine

import (
	"fmt"
	"time"

	"github.com/sagad/sagad/capsule"
)

// RecordAttempt records, before the failure policy calls the executor (or
// reviewer) again or pauses for a person, that attempt Attempt of Cycle
// failed with Failure and what the capsule has spent so far. Only the
// holder of the cycle's claim may record it; recording an attempt already
// recorded changes nothing, so a CAS retry or a redelivery is harmless.
type RecordAttempt struct {
	// Phase is the step that called: EXECUTION (the zero value means it
	// too) or REVIEW.
	Phase      capsule.Phase
	Cycle      int
	Holder     string
	Attempt    int
	Failure    capsule.AttemptFailure
	BudgetUsed capsule.Usage
	// Decision is what the failure policy does next: capsule.AttemptRetried
	// or capsule.AttemptPaused (a halt is recorded with the halt's
	// decision, Record.Attempt). Empty reads as a retry.
	Decision string
}

// Name implements Event.
func (RecordAttempt) Name() string { return "record_attempt" }

func recordAttempt(cp *capsule.Checkpoint, e RecordAttempt, now time.Time) (bool, error) {
	if e.Attempt < 1 {
		return false, refuse(ErrInvalid, e, cp, fmt.Sprintf("attempt %d", e.Attempt))
	}
	step := e.Phase
	if step == 0 {
		step = capsule.Execution
	}
	if step != capsule.Execution && step != capsule.ReviewPhase {
		return false, refuse(ErrInvalid, e, cp, fmt.Sprintf("only EXECUTION and REVIEW call agents, not %s", step))
	}
	if !Running(cp, step, e.Cycle) {
		return false, refuse(ErrStale, e, cp, fmt.Sprintf("%s cycle %d", step, e.Cycle))
	}
	if ex := cp.State.Execution; ex == nil || ex.Cycle != e.Cycle || ex.Holder != e.Holder {
		return false, refuse(ErrClaimLost, e, cp, "")
	}
	if done, _ := cp.State.FailedAttemptsAt(step, e.Cycle); done >= e.Attempt {
		return false, nil
	}
	rec := &capsule.ExecutionAttempts{Cycle: e.Cycle, Failed: e.Attempt, LastFailure: e.Failure}
	if step == capsule.ReviewPhase {
		rec.Phase = step // EXECUTION's records keep the bytes they had
	}
	// The failed call's open questions went with it.
	callEnded(&cp.State)
	cp.State.Attempts = rec
	cp.State.BudgetUsed = e.BudgetUsed
	decision := e.Decision
	if decision == "" {
		decision = capsule.AttemptRetried
	}
	cp.State.LogAttempt(capsule.FailedAttempt{
		Phase: step, Cycle: e.Cycle, Attempt: e.Attempt, ExitCode: e.Failure.ExitCode,
		Timeout: e.Failure.Timeout, Error: e.Failure.Error, Decision: decision, At: now,
	})
	return true, nil
}
