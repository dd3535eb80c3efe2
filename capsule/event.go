package capsule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// EventKind names a lifecycle event on a capsule's event stream.
type EventKind string

// Lifecycle event kinds.
const (
	EventReceived          EventKind = "received"
	EventPhaseStarted      EventKind = "phase_started"
	EventPhaseCompleted    EventKind = "phase_completed"
	EventLoopedBack        EventKind = "looped_back"
	EventHalted            EventKind = "halted"
	EventCompleted         EventKind = "completed"
	EventCancelled         EventKind = "cancelled"
	EventPaused            EventKind = "paused"
	EventResumed           EventKind = "resumed"
	EventWaiting           EventKind = "waiting_for_operator"
	EventRevisionTriggered EventKind = "revision_triggered"
	EventOperatorAccepted  EventKind = "operator_accepted"
	EventOperatorRejected  EventKind = "operator_rejected"
	EventDependencyWait    EventKind = "waiting_for_dependencies"
	// EventWaveWait: the capsule waits for its wave's capacity.
	EventWaveWait EventKind = "waiting_for_wave_capacity"
	// EventFamilyWait: the child capsule waits for room in its parent's
	// caps (docs/DELEGATION.md).
	EventFamilyWait       EventKind = "waiting_for_parent_capacity"
	EventDuplicateIgnored EventKind = "duplicate_ignored"
	// EventReplayed: sagactl replay started a new run of the capsule.
	EventReplayed EventKind = "replayed"
	// EventAttemptFailed: an executor or reviewer call failed; its detail
	// says which attempt, how, and what the failure policy decided.
	EventAttemptFailed EventKind = "attempt_failed"
	// EventAgentQuery: an agent asked a person a question during its call
	// (trigger agent_query); its detail carries the question.
	EventAgentQuery EventKind = "agent_query"
	// EventAgentQueryAnswered: a person answered an agent's question; By
	// says who, the detail what.
	EventAgentQueryAnswered EventKind = "agent_query_answered"
)

// Event is one entry of a capsule's append-only lifecycle stream. ID is
// deterministic (key, phase, cycle, kind), and doubles as the JetStream
// de-duplication id, so a re-emitted event is stored once.
type Event struct {
	ID        string    `json:"id"`
	Kind      EventKind `json:"kind"`
	CapsuleID string    `json:"capsule_id"`
	Key       string    `json:"key"`
	Phase     Phase     `json:"phase"`
	PhaseName string    `json:"phase_name"`
	Cycle     int       `json:"cycle"`
	TraceID   string    `json:"trace_id,omitempty"`
	Detail    string    `json:"detail,omitempty"`
	By        string    `json:"by,omitempty"`
	// Said is what the person who acted said: a resume's answer, a
	// revise's, reject's or accept's rationale.
	Said     string    `json:"said,omitempty"`
	Findings []Finding `json:"findings,omitempty"`
	// Step and StepName are a composition event's step (its index in the
	// document, and its name); absent on a capsule's events and on a
	// composition event about the whole run.
	Step     *int   `json:"step,omitempty"`
	StepName string `json:"step_name,omitempty"`
	// Round is a composition step's verification loop round, from 2
	// (absent: round 1, or no loop).
	Round int `json:"round,omitempty"`
	// Artifact is the step's result on composition_step_ended: the last
	// artifact ref of a step that completed.
	Artifact string    `json:"artifact,omitempty"`
	At       time.Time `json:"at"`
}

// ErrInvalidEvents is wrapped by every error of [DecodeEvents].
var ErrInvalidEvents = errors.New("invalid events message")

// DecodeEvents reads one message of a capsule's event stream. sagad writes
// the events of one transition together, as a JSON array, so that a
// transition costs one message; a single JSON object is one event. Anyone
// who may publish on the events subjects can put bytes there, so each event
// must be an object with a kind; errors wrap [ErrInvalidEvents].
func DecodeEvents(data []byte) ([]Event, error) {
	data = bytes.TrimSpace(data)
	var evs []Event
	if len(data) > 0 && data[0] == '[' {
		var objs []json.RawMessage
		if err := json.Unmarshal(data, &objs); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidEvents, err)
		}
		evs = make([]Event, 0, len(objs))
		for i, o := range objs {
			ev, err := decodeEvent(o)
			if err != nil {
				return nil, fmt.Errorf("%w: [%d]: %w", ErrInvalidEvents, i, err)
			}
			evs = append(evs, ev)
		}
		return evs, nil
	}
	ev, err := decodeEvent(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidEvents, err)
	}
	return []Event{ev}, nil
}

func decodeEvent(data []byte) (Event, error) {
	var ev Event
	if len(data) == 0 || data[0] != '{' {
		return ev, errors.New("an event is a JSON object")
	}
	if err := json.Unmarshal(data, &ev); err != nil {
		return ev, err
	}
	if ev.Kind == "" {
		return ev, errors.New("event without a kind")
	}
	return ev, nil
}
