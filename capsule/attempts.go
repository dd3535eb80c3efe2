package capsule

// ExecutionAttempts counts the failed executor calls of one cycle that the
// failure policy answered with a retry or a pause, so a redelivery, a
// restart or a resume goes on with the next attempt (its own idempotency
// key) instead of starting over.
type ExecutionAttempts struct {
	Cycle int `json:"cycle"`
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

// FailedAttempts is how many calls of cycle failed (0 when none recorded).
func (s CheckpointState) FailedAttempts(cycle int) (int, *AttemptFailure) {
	if a := s.Attempts; a != nil && a.Cycle == cycle {
		f := a.LastFailure
		return a.Failed, &f
	}
	return 0, nil
}
