package capsule

// ExecutionAttempts counts the failed agent calls of one cycle's step
// (EXECUTION's executor, or REVIEW's reviewer) that the failure policy
// answered with a retry or a pause, so a redelivery, a restart or a resume
// goes on with the next attempt (its own idempotency key) instead of
// starting over.
type ExecutionAttempts struct {
	Cycle int `json:"cycle"`
	// Phase is the step whose calls failed: REVIEW (5) for a reviewer's;
	// omitted (0) for EXECUTION's, as before reviewers followed the policy.
	Phase Phase `json:"phase,omitempty"`
	// Failed is how many calls of Cycle failed; the next call is attempt
	// Failed+1.
	Failed int `json:"failed"`
	// LastFailure is what the latest failed call said; the next call's
	// previous_failure.
	LastFailure AttemptFailure `json:"last_failure"`
}

// AttemptFailure is a failed call's diagnostics, bounded by the executors
// package.
type AttemptFailure struct {
	ExitCode   int    `json:"exit_code,omitempty"`
	Timeout    bool   `json:"timeout,omitempty"`
	Error      string `json:"error"`
	StderrTail string `json:"stderr_tail,omitempty"`
}

// FailedAttempts is how many executor calls of cycle failed (0 when none
// recorded).
func (s CheckpointState) FailedAttempts(cycle int) (int, *AttemptFailure) {
	return s.FailedAttemptsAt(Execution, cycle)
}

// FailedAttemptsAt is how many agent calls of phase p (EXECUTION or REVIEW)
// failed on cycle (0 when none recorded).
func (s CheckpointState) FailedAttemptsAt(p Phase, cycle int) (int, *AttemptFailure) {
	if a := s.Attempts; a != nil && a.Cycle == cycle && a.step() == p {
		f := a.LastFailure
		return a.Failed, &f
	}
	return 0, nil
}

// step is the phase whose calls a record counts.
func (a *ExecutionAttempts) step() Phase {
	if a.Phase == 0 {
		return Execution
	}
	return a.Phase
}
