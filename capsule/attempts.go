package capsule

import "time"

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

// Decisions the failure policy takes on a failed attempt, as a
// [FailedAttempt] records them.
const (
	AttemptRetried = "retry"
	AttemptPaused  = "pause"
	AttemptHalted  = "halt"
)

// MaxAttemptLog bounds [CheckpointState.AttemptLog]: a checkpoint keeps the
// newest failed attempts, so a capsule retried for days does not grow its
// checkpoint without end.
const MaxAttemptLog = 32

// FailedAttempt is one failed agent call and what the failure policy did
// about it, kept so that status and history show every retry, not only the
// last failure.
type FailedAttempt struct {
	// Phase is EXECUTION (4) for the executor's calls, REVIEW (5) for the
	// reviewer's.
	Phase   Phase `json:"phase"`
	Cycle   int   `json:"cycle"`
	Attempt int   `json:"attempt"`
	// ExitCode is the command's exit code (0 when the call did not exit,
	// e.g. a timeout or a transport error).
	ExitCode int  `json:"exit_code,omitempty"`
	Timeout  bool `json:"timeout,omitempty"`
	// Error is the failure's bounded diagnostic.
	Error string `json:"error"`
	// Decision is what the failure policy did: retry, pause or halt.
	Decision string    `json:"decision"`
	At       time.Time `json:"at"`
}

// Same reports whether a and b record the same call.
func (a FailedAttempt) Same(b FailedAttempt) bool {
	return a.Phase == b.Phase && a.Cycle == b.Cycle && a.Attempt == b.Attempt
}

// LogAttempt appends a to the attempt log unless the same call is logged
// already (a redelivery or a CAS retry records it again), keeping the
// newest [MaxAttemptLog]. It reports whether the log changed.
func (s *CheckpointState) LogAttempt(a FailedAttempt) bool {
	for _, x := range s.AttemptLog {
		if x.Same(a) {
			return false
		}
	}
	a.At = a.At.UTC()
	s.AttemptLog = append(s.AttemptLog, a)
	if n := len(s.AttemptLog); n > MaxAttemptLog {
		s.AttemptLog = append([]FailedAttempt(nil), s.AttemptLog[n-MaxAttemptLog:]...)
	}
	return true
}
