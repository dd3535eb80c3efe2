package executors

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Failure-policy defaults and bounds (per endpoint: failure_retries,
// self_heal).
const (
	DefaultFailureRetries = 1
	DefaultSelfHeal       = 2
	// MaxFailureRetries bounds failure_retries and self_heal: every retry
	// is another paid call.
	MaxFailureRetries = 5
	// MaxPreviousFailure bounds the error and stderr tail a retry's
	// previous_failure carries.
	MaxPreviousFailure = 2 << 10
)

// Action is what the failure policy does with a failed call.
type Action string

// Actions.
const (
	// ActionRetry calls the executor (or reviewer) again, with
	// previous_failure.
	ActionRetry Action = "retry"
	// ActionPause pauses the capsule for a person (trigger
	// blocked_external, with the failure's message); resume runs the step
	// again.
	ActionPause Action = "pause"
	// ActionHalt halts the capsule executor_failed, as without a policy
	// (a reviewer's failure: executor_failed:reviewer: …).
	ActionHalt Action = "halt"
)

// Policy is one endpoint's failure policy.
type Policy struct {
	// FailureRetries is how often a "retry once" failure (command exit 1,
	// exit 21, a command timeout) is retried.
	FailureRetries int
	// SelfHeal is how often a "retry" failure (command exit 12, a NATS
	// failed reply with retryable: true) is retried.
	SelfHeal int
}

// DefaultPolicy is the policy of an endpoint that sets neither knob.
var DefaultPolicy = Policy{FailureRetries: DefaultFailureRetries, SelfHeal: DefaultSelfHeal}

// Decide maps the error of a call to an action, given how many retries this
// cycle already made. The table (docs/FAILURES.md "Failure policy"):
//
//	command exit 1, exit 21, timeout   retry, up to FailureRetries times
//	command exit 12                    retry, up to SelfHeal times
//	NATS failed reply, retryable:true  retry, up to SelfHeal times
//	command exit 11 (escalation)       pause for a person
//	anything else                      halt
//
// A retry that is not allowed any more halts. Errors other than
// [*FailedError] (accepted, human input, transport) are not the policy's:
// Decide returns halt for them and callers handle them as before.
func (p Policy) Decide(err error, retriesDone int) Action {
	var f *FailedError
	if !errors.As(err, &f) {
		return ActionHalt
	}
	limit := -1
	switch {
	case f.ExitCode == ExitNeedsEscalation:
		return ActionPause
	case f.ExitCode == ExitFailure, f.ExitCode == ExitTimeout, f.Timeout:
		limit = p.FailureRetries
	case f.ExitCode == ExitPartialSuccess, f.Retryable:
		limit = p.SelfHeal
	}
	if retriesDone < limit {
		return ActionRetry
	}
	return ActionHalt
}

// PreviousFailure is what a retry tells the executor about the attempt
// before it: the self-heal's diagnostics. It is the request's
// previous_failure.
type PreviousFailure struct {
	// Attempt is the number of the failed attempt (1 is the first call).
	Attempt int `json:"attempt"`
	// ExitCode is a command's exit status; omitted for other failures.
	ExitCode int `json:"exit_code,omitempty"`
	// Timeout says the attempt ran out of time.
	Timeout bool `json:"timeout,omitempty"`
	// Error is the failure's message, at most [MaxPreviousFailure] bytes.
	Error string `json:"error"`
	// StderrTail is the end of a command's stderr, at most
	// [MaxPreviousFailure] bytes.
	StderrTail string `json:"stderr_tail,omitempty"`
}

// NewPreviousFailure describes err, the failure of attempt, for the retry.
func NewPreviousFailure(attempt int, err error) *PreviousFailure {
	pf := &PreviousFailure{Attempt: attempt}
	var f *FailedError
	if errors.As(err, &f) {
		pf.ExitCode, pf.Timeout, pf.Error, pf.StderrTail = f.ExitCode, f.Timeout, f.Detail, tail(f.Stderr)
	} else if err != nil {
		pf.Error = err.Error()
	}
	pf.Error = tail(pf.Error)
	return pf
}

// tail keeps the last MaxPreviousFailure bytes of s, cut at a rune start.
func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) <= MaxPreviousFailure {
		return s
	}
	s = s[len(s)-MaxPreviousFailure:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}

// checkPolicyKnob validates failure_retries or self_heal.
func checkPolicyKnob(v *int) error {
	if v != nil && (*v < 0 || *v > MaxFailureRetries) {
		return fmt.Errorf("%d: want 0 to %d", *v, MaxFailureRetries)
	}
	return nil
}

// SetPolicy sets the failure policy of task kind kind's executor.
func (r *Registry) SetPolicy(kind string, p Policy) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.policies == nil {
		r.policies = map[string]Policy{}
	}
	r.policies[kind] = p
}

// Policy is the failure policy of task kind kind's executor: the one set
// with [Registry.SetPolicy], else [DefaultPolicy].
func (r *Registry) Policy(kind string) Policy {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if p, ok := r.policies[kind]; ok {
		return p
	}
	return DefaultPolicy
}

// SetReviewerPolicy sets the failure policy of reviewer id.
func (r *Registry) SetReviewerPolicy(id string, p Policy) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reviewerPolicies == nil {
		r.reviewerPolicies = map[string]Policy{}
	}
	r.reviewerPolicies[id] = p
}

// ReviewerPolicy is the failure policy of reviewer id: the one set with
// [Registry.SetReviewerPolicy], else [DefaultPolicy]. A reviewer's exit 10
// is a verdict (CHANGES_REQUESTED), never a failure.
func (r *Registry) ReviewerPolicy(id string) Policy {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if p, ok := r.reviewerPolicies[id]; ok {
		return p
	}
	return DefaultPolicy
}
