package executors

import (
	"errors"
	"fmt"
	"time"

	"github.com/sagad/sagad/capsule"
)

// ErrAccepted is matched by the [*AcceptedError] an adapter returns when a
// worker answered "accepted": the result will arrive later on the
// completion subject, and the capsule should wait (paused, trigger
// blocked_external) instead of halting.
var ErrAccepted = errors.New("executors: accepted, result follows on the completion subject")

// AcceptedError says a call was accepted for asynchronous work. It matches
// [ErrAccepted] with errors.Is.
type AcceptedError struct {
	// Subject is where the worker will publish the [Completion]:
	// CompletionSubject(capsule id, cycle).
	Subject string
	// Timeout is how long to wait for the completion before halting; zero
	// when the adapter was not configured with one.
	Timeout time.Duration
	// Usage is what the worker reported with its acceptance, if anything.
	Usage capsule.Usage
}

func (e *AcceptedError) Error() string {
	if e.Subject == "" {
		return ErrAccepted.Error()
	}
	return "executors: accepted, result follows on " + e.Subject
}

// Is reports whether target is [ErrAccepted].
func (e *AcceptedError) Is(target error) bool { return target == ErrAccepted }

// ErrHumanInput is matched by the [*HumanInputError] returned when the work
// cannot go on without a person (command exit status 3, HUMAN_INPUT): the
// capsule should pause with trigger blocked_external.
var ErrHumanInput = errors.New("executors: human input required")

// HumanInputError says the worker needs a person. It matches [ErrHumanInput]
// with errors.Is.
type HumanInputError struct {
	// Detail is what the worker said it needs (its reply's error, else the
	// tail of its stderr); it may be empty.
	Detail string
	// Usage is what the call consumed before stopping.
	Usage capsule.Usage
}

func (e *HumanInputError) Error() string {
	if e.Detail == "" {
		return ErrHumanInput.Error()
	}
	return ErrHumanInput.Error() + ": " + e.Detail
}

// Is reports whether target is [ErrHumanInput].
func (e *HumanInputError) Is(target error) bool { return target == ErrHumanInput }

// ErrMalformedReply is wrapped by every error [DecodeExecutorReply],
// [DecodeReviewerReply] and [DecodeCompletion] return.
var ErrMalformedReply = errors.New("malformed reply")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformedReply}, args...)...)
}
