package machine

import (
	"fmt"

	"github.com/sagad/sagad/capsule"
)

// RecordAttempt records, before the failure policy calls the executor again
// (or pauses for a person), that attempt Attempt of Cycle failed with
// Failure and what the capsule has spent so far. Only the holder of the
// cycle's claim may record it; recording an attempt already recorded
// changes nothing, so a CAS retry or a redelivery is harmless.
type RecordAttempt struct {
	Cycle      int
	Holder     string
	Attempt    int
	Failure    capsule.AttemptFailure
	BudgetUsed capsule.Usage
}

// Name implements Event.
func (RecordAttempt) Name() string { return "record_attempt" }

func recordAttempt(cp *capsule.Checkpoint, e RecordAttempt) (bool, error) {
	if e.Attempt < 1 {
		return false, refuse(ErrInvalid, e, cp, fmt.Sprintf("attempt %d", e.Attempt))
	}
	if !Current(cp, capsule.Execution, e.Cycle) {
		return false, refuse(ErrStale, e, cp, fmt.Sprintf("%s cycle %d", capsule.Execution, e.Cycle))
	}
	if ex := cp.State.Execution; ex == nil || ex.Cycle != e.Cycle || ex.Holder != e.Holder {
		return false, refuse(ErrClaimLost, e, cp, "")
	}
	if done, _ := cp.State.FailedAttempts(e.Cycle); done >= e.Attempt {
		return false, nil
	}
	cp.State.Attempts = &capsule.ExecutionAttempts{Cycle: e.Cycle, Failed: e.Attempt, LastFailure: e.Failure}
	cp.State.BudgetUsed = e.BudgetUsed
	return true, nil
}
