package capsule

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
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
// Every encode and decode of a checkpoint asks, so the 50 digits are
// checked eight at a time (lowerHex8), not one by one.
func traceIDOf(tp string) (string, bool) {
	if len(tp) != 55 || tp[:3] != "00-" || tp[35] != '-' || tp[52] != '-' {
		return "", false
	}
	// The trace id (3–35) and span id (36–52) are whole words; the two
	// digits of the flags (53–55) are looked at one by one.
	ok := lowerHex8(tp[3:11]) && lowerHex8(tp[11:19]) && lowerHex8(tp[19:27]) && lowerHex8(tp[27:35]) &&
		lowerHex8(tp[36:44]) && lowerHex8(tp[44:52]) && isLowerHex(tp[53]) && isLowerHex(tp[54])
	if !ok {
		return "", false
	}
	return tp[3:35], true
}

// TraceIDOf returns the trace id of traceparent tp when tp is a W3C
// traceparent of version 00 in its canonical form (55 bytes, lower-case
// hex), and whether it is one; an id of zeros is not refused here. It is
// the test a checkpoint's encoding and decoding make.
func TraceIDOf(tp string) (string, bool) { return traceIDOf(tp) }

// lowerHex8 reports whether the eight bytes of s are all lower-case hex
// digits ('0'–'9', 'a'–'f').
//
// For a byte c below 0x80, c+(0x80-lo) has its top bit set exactly when
// c >= lo, and no byte carries into the next (the sum stays below 0x100):
// so one addition per bound tests a range in every byte at once. A byte
// of 0x80 or more fails on its own top bit.
func lowerHex8(s string) bool {
	_ = s[7]
	x := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
	if x&msb != 0 {
		return false
	}
	digit := (x + (0x80-'0')*lsb) &^ (x + (0x80-'9'-1)*lsb)
	letter := (x + (0x80-'a')*lsb) &^ (x + (0x80-'f'-1)*lsb)
	return (digit|letter)&msb == msb
}

func isLowerHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }

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
	x, err := decodeCompact(b)
	if err != nil {
		return err
	}
	x.PhaseName = x.Phase.String()
	*t = x
	return nil
}

// decodeCompact reads a compact transition. encoding/json hands
// UnmarshalJSON one whole, valid JSON value, so only the shape is checked
// here: the values are read by hand, as encoding/json would read them into
// the fields, without a decoder per element (the history is most of a
// checkpoint, and a reader decodes every entry).
func decodeCompact(b []byte) (Transition, error) {
	var x Transition
	d := compactReader{b: b, i: 1} // past '['
	var err error
	phase, err := d.int(false)
	if err == nil {
		x.Phase = Phase(phase)
		x.Cycle, err = d.int(true)
	}
	if err == nil {
		x.Outcome, err = d.string(true)
	}
	var at []byte
	if err == nil {
		at, err = d.next(true)
	}
	if err == nil {
		err = x.At.UnmarshalJSON(at)
	}
	if err == nil && d.more() {
		if x.Detail, err = d.string(true); err == nil {
			x.Run, err = d.int(true)
		}
	}
	if err == nil && d.more() {
		err = errCompactTransition
	}
	return x, err
}

// compactReader reads the values of a valid JSON array one by one.
type compactReader struct {
	b []byte
	i int
}

func (d *compactReader) skipSpace() {
	for d.i < len(d.b) && (d.b[d.i] == ' ' || d.b[d.i] == '\t' || d.b[d.i] == '\n' || d.b[d.i] == '\r') {
		d.i++
	}
}

// more reports whether another value follows (a comma) rather than ']'.
func (d *compactReader) more() bool {
	d.skipSpace()
	return d.i < len(d.b) && d.b[d.i] == ','
}

// next returns the next value's bytes, past the comma before it when
// comma is set. Only numbers and strings are values here.
func (d *compactReader) next(comma bool) ([]byte, error) {
	d.skipSpace()
	if comma {
		if d.i >= len(d.b) || d.b[d.i] != ',' {
			return nil, errCompactTransition
		}
		d.i++
		d.skipSpace()
	}
	start := d.i
	switch {
	case d.i < len(d.b) && d.b[d.i] == '"':
		for d.i++; d.i < len(d.b) && d.b[d.i] != '"'; d.i++ {
			if d.b[d.i] == '\\' {
				d.i++
			}
		}
		d.i++
	default:
		for d.i < len(d.b) && strings.IndexByte("-+.0123456789eE", d.b[d.i]) >= 0 {
			d.i++
		}
	}
	if d.i == start || d.i > len(d.b) {
		return nil, errCompactTransition
	}
	return d.b[start:d.i], nil
}

// int reads an integer as encoding/json reads one into an int.
func (d *compactReader) int(comma bool) (int, error) {
	v, err := d.next(comma)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(string(v))
	if err != nil {
		return 0, errCompactTransition
	}
	return n, nil
}

// string reads a string as encoding/json reads one: escapes decoded and
// invalid UTF-8 replaced, which encoding/json itself does when there are.
func (d *compactReader) string(comma bool) (string, error) {
	v, err := d.next(comma)
	if err != nil || v[0] != '"' {
		return "", errCompactTransition
	}
	inner := v[1 : len(v)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner), nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", err
	}
	return s, nil
}
