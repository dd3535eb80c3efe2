package capsule

import (
	"bytes"
	"encoding/json"
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
	EventDuplicateIgnored  EventKind = "duplicate_ignored"
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
	Findings  []Finding `json:"findings,omitempty"`
	At        time.Time `json:"at"`
}

// DecodeEvents reads one message of a capsule's event stream. sagad writes
// the events of one transition together, as a JSON array, so that a
// transition costs one message; a single JSON object is one event.
func DecodeEvents(data []byte) ([]Event, error) {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '[' {
		var evs []Event
		if err := json.Unmarshal(data, &evs); err != nil {
			return nil, err
		}
		return evs, nil
	}
	var ev Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return nil, err
	}
	return []Event{ev}, nil
}
