package capsule

import (
	"bytes"
	"encoding/json"
	"errors"
)

// plainCheckpoint is Checkpoint without its methods, for encoding/json to
// fill.
type plainCheckpoint Checkpoint

// UnmarshalJSON reads a checkpoint in either encoding: encoding/json's
// (every record written before checkpoints were compacted, and what
// encoding/json writes today) and AppendJSON's, which leaves out key when
// it is capsule_id and trace_id when it is trace_parent's trace id. Only a
// member that is absent is made again; one written empty stays empty.
func (c *Checkpoint) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil // encoding/json leaves a struct as it is for null
	}
	v := struct {
		*plainCheckpoint
		// Shallower than plainCheckpoint's, so these take the members.
		Key     *string `json:"key"`
		TraceID *string `json:"trace_id"`
	}{plainCheckpoint: (*plainCheckpoint)(c)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if v.Key != nil {
		c.Key = *v.Key
	} else {
		c.Key = c.CapsuleID
	}
	if v.TraceID != nil {
		c.TraceID = *v.TraceID
	} else {
		c.TraceID, _ = traceIDOf(c.TraceParent)
	}
	return nil
}

// traceIDOf returns the trace id of a W3C traceparent of version 00 in
// its canonical form (lower-case hex), and whether tp is one. Only that
// form is relied on: its text is the same after a round trip through JSON.
func traceIDOf(tp string) (string, bool) {
	if len(tp) != 55 || tp[:3] != "00-" || tp[35] != '-' || tp[52] != '-' {
		return "", false
	}
	for i := 3; i < len(tp); i++ {
		if c := tp[i]; i != 35 && i != 52 && !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", false
		}
	}
	return tp[3:35], true
}

// plainTransition is Transition without its methods.
type plainTransition Transition

// errCompactTransition is the error for an array that is no compact
// transition.
var errCompactTransition = errors.New("checkpoint: a compact transition is [phase,cycle,outcome,at] or [phase,cycle,outcome,at,detail,run]")

// UnmarshalJSON reads a transition as encoding/json writes it (an object)
// or as AppendJSON writes it (an array, whose phase name is its phase's).
func (t *Transition) UnmarshalJSON(b []byte) error {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 || b[0] != '[' {
		if bytes.Equal(b, []byte("null")) {
			return nil
		}
		return json.Unmarshal(b, (*plainTransition)(t))
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(b, &parts); err != nil {
		return err
	}
	if len(parts) != 4 && len(parts) != 6 {
		return errCompactTransition
	}
	var x Transition
	fields := []any{&x.Phase, &x.Cycle, &x.Outcome, &x.At, &x.Detail, &x.Run}
	for i, p := range parts {
		if bytes.Equal(p, []byte("null")) {
			return errCompactTransition
		}
		if err := json.Unmarshal(p, fields[i]); err != nil {
			return err
		}
	}
	x.PhaseName = x.Phase.String()
	*t = x
	return nil
}
