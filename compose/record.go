package compose

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sagad/sagad/store"
)

// Record is what sagad assigned to one run of one producer's composition
// (a chain is a composition of one shape): the
// document it was made of (by digest) and the capsule id of every step.
type Record struct {
	CompositionID string `json:"chain_id"`
	Producer      string `json:"producer"`
	// Digest is the SHA-256 (lowercase hex) of the composition document's bytes:
	// the same document again gets the same steps.
	Digest string `json:"digest"`
	// Steps are the steps' capsule ids, in order: random, so nobody can
	// claim one before sagad publishes it.
	Steps []string `json:"steps"`
	// StepDigests are the integrity digests of the steps' sealed capsules
	// sagad published, in order.
	StepDigests []string  `json:"step_digests"`
	CreatedAt   time.Time `json:"created_at"`
	// Run is the composition's run, from 1 (0 in a record written before
	// runs were counted is run 1): an edited document under the same id
	// is a new run, with new steps.
	Run int `json:"run,omitempty"`
	// Names are the steps' names, in order (empty for a chain document,
	// whose step i is step-<i>).
	Names []string `json:"names,omitempty"`
	// Needs are each step's needs as indexes into Steps, aligned with
	// Names (empty for a chain document, whose step i needs step i-1, and
	// in a record written before needs were kept): indexes, not names, so
	// a 256-step record stays small.
	Needs [][]int `json:"needs,omitempty"`
	// State is the run's: "" (running) or paused until every step ended,
	// then completed, failed or partial (see [EndState]); or
	// cancelled.
	State string `json:"state,omitempty"`
	// Ended is each step's end, aligned with Steps (empty while none ended;
	// an entry's State is "" until its step ends).
	Ended []StepEnd `json:"ended,omitempty"`
	// OutcomeSent: the run's one outcome message was acknowledged.
	OutcomeSent bool `json:"outcome_sent,omitempty"`
	// EndedAt is when the last step's end was recorded.
	EndedAt *time.Time `json:"ended_at,omitempty"`
	// Replays counts the replays of the run (composition replay), from 0.
	Replays int `json:"round,omitempty"`
	// By is who last paused, resumed, cancelled or replayed the run, and
	// Reason why.
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Loops are the run's verification loops, in the document's order
	// (see [LoopRun]).
	Loops []LoopRun `json:"loops,omitempty"`
	// Held are the steps after a loop that wait, unpublished, until every
	// loop before them passed: they are built then, on the last round's
	// capsules.
	Held []int `json:"held,omitempty"`
	// Unpublished are the steps recorded (ids, digests) but not yet known
	// published: a loop's new round, the steps a loop released. Whoever
	// reads the record publishes them (idempotently) and clears them.
	Unpublished []int `json:"unpublished,omitempty"`
	// PublishError is why the compose request could not publish the
	// steps in Unpublished (the producer's intake full, "maximum messages
	// per subject exceeded"): sagad publishes them itself as room appears
	// (compose.Service) and clears it. Empty otherwise.
	PublishError string `json:"publish_error,omitempty"`
}

// AllEnded reports whether every step of r ended.
func (r *Record) AllEnded() bool {
	if len(r.Ended) != len(r.Steps) {
		return false
	}
	for _, e := range r.Ended {
		if e.State == "" {
			return false
		}
	}
	return true
}

// StepEnd is how one step of a composition ended.
type StepEnd struct {
	// State is the capsule's end: completed, halted or cancelled.
	State string `json:"state,omitempty"`
	// Artifact is the step's final artifact ref (the last of its
	// artifact_refs), for a completed step.
	Artifact   string  `json:"artifact,omitempty"`
	HaltReason string  `json:"halt_reason,omitempty"`
	Tokens     int64   `json:"tokens,omitempty"`
	Dollars    float64 `json:"dollars,omitempty"`
	// After, for a step replayed, is the capsule run whose end is past:
	// only a later run's end is the step's.
	After int `json:"after,omitempty"`
}

// Composition states (a run's).
const (
	StateRunning   = "running"
	StateCompleted = "completed"
	StateFailed    = "failed"
	StatePartial   = "partial"
	StateCancelled = "cancelled"
	StatePaused    = "paused"
)

// CompositionState is the state of a run whose steps all ended, from how
// many completed: all (completed), none (failed) or some (partial).
func EndState(passed, total int) string {
	switch {
	case passed == total:
		return StateCompleted
	case passed == 0:
		return StateFailed
	}
	return StatePartial
}

// StateOf is r's state: running until its steps all ended.
func (r *Record) StateOf() string {
	if r.State == "" {
		return StateRunning
	}
	return r.State
}

// RunOf is r's run, from 1.
func (r *Record) RunOf() int { return max(r.Run, 1) }

// Loop states (a verification loop's, [LoopRun].State).
const (
	// LoopRunning: a round runs ("" in the record).
	LoopRunning = "running"
	// LoopPassed: the verifier completed APPROVED by its reviewer.
	LoopPassed = "passed"
	// LoopFailed: max_rounds rounds ran and the verifier never passed.
	LoopFailed = "failed"
	// LoopNoProgress: two rounds in a row found no fewer findings than the
	// round before; a person decides (accept or reject).
	LoopNoProgress = "no_progress"
	// LoopAccepted: a person accepted a loop stopped for no_progress.
	LoopAccepted = "accepted"
	// LoopRejected: a person rejected a loop stopped for no_progress.
	LoopRejected = "rejected"
)

// ReasonNoProgress is the paused run's reason while a loop waits for a
// person ([LoopNoProgress]).
const ReasonNoProgress = "no_progress"

// LoopRun is one verification loop of a run: its steps, the round it is
// in and every round's capsules and findings.
type LoopRun struct {
	// Steps are the loop's steps as indexes into the record's Steps, the
	// verifier last.
	Steps     []int `json:"steps"`
	MaxRounds int   `json:"max_rounds"`
	// Round is the round running or last run, from 1.
	Round int `json:"round"`
	// State is "" while rounds run, then one of the Loop* states.
	State string `json:"state,omitempty"`
	// Rounds are the rounds started, oldest first.
	Rounds []LoopRound `json:"rounds"`
	// By and Reason say who decided a loop stopped for no_progress, and why.
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	// At is when State last changed.
	At *time.Time `json:"at,omitempty"`
}

// LoopRound is one round of a loop.
type LoopRound struct {
	// IDs are the round's capsule ids, aligned with [LoopRun].Steps.
	IDs []string `json:"ids"`
	// Ended is set once every step of the round ended.
	Ended bool `json:"ended,omitempty"`
	// Passed: the round's verifier completed APPROVED by its reviewer.
	Passed bool `json:"passed,omitempty"`
	// Findings counts the verifier's findings on the round.
	Findings int `json:"findings,omitempty"`
	// Tokens and Dollars are what the round's steps spent, once it ended:
	// the record's ends hold only the last round's.
	Tokens  int64   `json:"tokens,omitempty"`
	Dollars float64 `json:"dollars,omitempty"`
}

// StateOf is l's state: running until it passed, failed or stopped.
func (l *LoopRun) StateOf() string {
	if l.State == "" {
		return LoopRunning
	}
	return l.State
}

// Verifier is the index of l's verifier step.
func (l *LoopRun) Verifier() int { return l.Steps[len(l.Steps)-1] }

// Settled reports whether l lets the steps after it go on (passed, or
// accepted by a person).
func (l *LoopRun) Settled() bool { return l.State == LoopPassed || l.State == LoopAccepted }

// maxLoops matches composition.schema.json's loops maxItems.
const maxLoops = 16

// validLoops checks what a record's loops index.
func validLoops(r *Record) error {
	n := len(r.Steps)
	if len(r.Loops) > maxLoops {
		return errors.New("composition record: too many loops")
	}
	for _, l := range r.Loops {
		if len(l.Steps) == 0 || l.Round < 1 || len(l.Rounds) != l.Round || l.MaxRounds < 1 {
			return errors.New("composition record: malformed loop")
		}
		for _, i := range l.Steps {
			if i < 0 || i >= n {
				return errors.New("composition record: malformed loop steps")
			}
		}
		for _, rd := range l.Rounds {
			if len(rd.IDs) != len(l.Steps) {
				return errors.New("composition record: malformed loop round")
			}
		}
	}
	for _, i := range slices.Concat(r.Held, r.Unpublished) {
		if i < 0 || i >= n {
			return errors.New("composition record: malformed held steps")
		}
	}
	return nil
}

// maxRecordSteps matches composition.schema.json's maxItems.
const maxRecordSteps = 256

// StateOfBytes is the state of the composition record b, for the
// metrics collector (which cannot import this package): ok is false for
// bytes that are not a record.
func StateOfBytes(b []byte) (state string, ok bool) {
	r, err := DecodeRecord(b)
	if err != nil {
		return "", false
	}
	return r.StateOf(), true
}

// DecodeRecord decodes a composition record, refusing one that does not
// hold together (sagad wrote every record, so this is corruption).
func DecodeRecord(b []byte) (*Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("composition record: %w", err)
	}
	if r.CompositionID == "" || len(r.Steps) == 0 || len(r.Steps) > maxRecordSteps || len(r.StepDigests) != len(r.Steps) || !store.ValidProducer(r.Producer) ||
		r.Run < 0 || (len(r.Names) != 0 && len(r.Names) != len(r.Steps)) || (len(r.Ended) != 0 && len(r.Ended) != len(r.Steps)) ||
		(len(r.Needs) != 0 && len(r.Needs) != len(r.Steps)) {
		return nil, errors.New("composition record: malformed")
	}
	for _, needs := range r.Needs {
		for _, j := range needs {
			if j < 0 || j >= len(r.Steps) {
				return nil, errors.New("composition record: malformed needs")
			}
		}
	}
	if err := validLoops(&r); err != nil {
		return nil, err
	}
	return &r, nil
}
