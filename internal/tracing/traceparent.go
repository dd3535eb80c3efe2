package tracing

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"

	"go.opentelemetry.io/otel/trace"
)

// W3C Trace Context names (https://www.w3.org/TR/trace-context/): the NATS
// header on requests to workers and on intake messages, and the environment
// variable a command executor gets (the OpenTelemetry convention for
// carrying context into a child process).
const (
	HeaderTraceparent = "traceparent"
	EnvTraceparent    = "TRACEPARENT"
)

// ErrMalformedTraceparent is returned by [ParseTraceparent] for a value that
// is not a W3C traceparent.
var ErrMalformedTraceparent = errors.New("tracing: malformed traceparent")

// ParseTraceparent reads a W3C traceparent ("00-<32 hex trace id>-<16 hex
// parent id>-<2 hex flags>") into a remote span context. It follows the
// spec's rules: lower-case hex only, version ff is invalid, version 00 is
// exactly 55 characters, a later version may append fields after a dash, and
// an all-zero trace or parent id is invalid. Anything else is
// [ErrMalformedTraceparent]: a producer's header is only ever used to place
// the capsule in a trace, never trusted for anything else.
func ParseTraceparent(s string) (trace.SpanContext, error) {
	if len(s) < 55 || (len(s) > 55 && s[55] != '-') || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return trace.SpanContext{}, ErrMalformedTraceparent
	}
	var ver, flags [1]byte
	var tid trace.TraceID
	var sid trace.SpanID
	if !decodeLowerHex(ver[:], s[0:2]) || !decodeLowerHex(tid[:], s[3:35]) ||
		!decodeLowerHex(sid[:], s[36:52]) || !decodeLowerHex(flags[:], s[53:55]) {
		return trace.SpanContext{}, ErrMalformedTraceparent
	}
	if ver[0] == 0xff || (ver[0] == 0 && len(s) != 55) || !tid.IsValid() || !sid.IsValid() {
		return trace.SpanContext{}, ErrMalformedTraceparent
	}
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]) & trace.FlagsSampled, Remote: true,
	}), nil
}

// ValidTraceparent reports whether [ParseTraceparent] accepts s, without
// decoding it into a span context: the exemplar of every transition asks
// only whether the checkpoint's traceparent holds a trace id.
func ValidTraceparent(s string) bool {
	if len(s) < 55 || (len(s) > 55 && s[55] != '-') || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	if !lowerHex(s[0:2]) || !lowerHex(s[3:35]) || !lowerHex(s[36:52]) || !lowerHex(s[53:55]) {
		return false
	}
	switch s[0:2] {
	case "ff":
		return false
	case "00":
		if len(s) != 55 {
			return false
		}
	}
	return !ZeroID(s[3:35]) && !ZeroID(s[36:52])
}

// lowerHex says s is lower-case hex digits only.
func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// ZeroID says s is "0" digits only: an invalid trace or span id.
func ZeroID(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '0' {
			return false
		}
	}
	return true
}

// decodeLowerHex decodes s, lower-case hex of exactly 2 × len(dst) digits,
// into dst.
func decodeLowerHex(dst []byte, s string) bool {
	for i := range dst {
		hi, ok1 := fromHex(s[2*i])
		lo, ok2 := fromHex(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func fromHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// FormatTraceparent writes sc as a version-00 traceparent; "" for an invalid
// span context.
func FormatTraceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	b := make([]byte, 0, 55)
	b = append(b, "00-"...)
	b = hex.AppendEncode(b, tid[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, sid[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, []byte{byte(sc.TraceFlags())})
	return string(b)
}

// TraceIDOf is the OpenTelemetry trace id of a capsule whose trace id (the
// checkpoint's trace_id, which a producer may set to any string) is id: id
// itself when it is already one (32 lower-case hex digits, not all zero),
// else one derived from it, so that every capsule given the same trace id
// lands in the same trace. ok is false for an empty id.
func TraceIDOf(id string) (tid trace.TraceID, ok bool) {
	if id == "" {
		return tid, false
	}
	if len(id) == 32 && decodeLowerHex(tid[:], id) && tid.IsValid() {
		return tid, true
	}
	sum := sha256.Sum256([]byte("sagad trace id\x00" + id))
	copy(tid[:], sum[:16])
	return tid, true
}

// TraceIDOfTraceparent is the trace id written in a traceparent, "" when
// it is malformed.
func TraceIDOfTraceparent(s string) string {
	sc, err := ParseTraceparent(s)
	if err != nil {
		return ""
	}
	return sc.TraceID().String()
}
