package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/jspub"
)

// Deferred is a phase whose advance was decided and not written: a phase
// whose decision is a function of what the checkpoint already holds (the
// capsule's own bytes) need not rewrite the checkpoint to say so. It sends
// the next phase's message naming it, and the phase receiving that message
// decides it again on the checkpoint and writes both transitions with its
// own first write. The message is a hint, never trusted: the receiving
// phase takes no deferred decision, it computes each one, and only while
// the checkpoint still stands in progress at that phase and cycle.
type Deferred struct {
	Phase capsule.Phase
	// At is when the phase decided: its history entry's time once written
	// (within what the checkpoint and the clock allow).
	At time.Time
}

// maxDeferred bounds a Saga-Deferred header: at most every phase between
// RECEPTION and HANDOFF.
const maxDeferred = int(capsule.NumPhases) - 2

// ErrBadDeferred: a Saga-Deferred header that is not "<phase>:<unix
// nanoseconds>" entries, comma separated, of phases 1–5 in ascending order.
var ErrBadDeferred = errors.New("bad " + HeaderDeferred + " header")

// DecodeDeferred reads a Saga-Deferred header ("" is none).
func DecodeDeferred(v string) ([]Deferred, error) {
	if v == "" {
		return nil, nil
	}
	// Entries are cut off one at a time (no strings.Split: a slice of
	// parts on every deferred message). Too many is refused before any
	// entry is judged, with their count, as the Split decoder did: a
	// count taken mid-way was one short, and a bad early entry hid it.
	count := strings.Count(v, ",") + 1
	if count > maxDeferred {
		return nil, fmt.Errorf("%w: %d entries", ErrBadDeferred, count)
	}
	out := make([]Deferred, 0, count)
	for rest, more := v, true; more; {
		var part string
		part, rest, more = strings.Cut(rest, ",")
		ph, at, ok := strings.Cut(part, ":")
		n, err := strconv.Atoi(ph)
		if !ok || err != nil || strconv.Itoa(n) != ph || n <= int(capsule.Reception) || n >= int(capsule.Handoff) {
			return nil, fmt.Errorf("%w: phase %q", ErrBadDeferred, PrintableKey(ph))
		}
		ns, err := strconv.ParseInt(at, 10, 64)
		if err != nil || ns <= 0 || !canonicalInt(ns, at) {
			return nil, fmt.Errorf("%w: time %q", ErrBadDeferred, PrintableKey(at))
		}
		if len(out) > 0 && capsule.Phase(n) <= out[len(out)-1].Phase {
			return nil, fmt.Errorf("%w: phases not ascending", ErrBadDeferred)
		}
		out = append(out, Deferred{Phase: capsule.Phase(n), At: time.Unix(0, ns).UTC()})
	}
	return out, nil
}

// encodeDeferred is the Saga-Deferred header of d.
func encodeDeferred(d []Deferred) string {
	// On the stack for up to three entries (the deferrable phases), so the
	// string is the one allocation.
	var buf [3 * 24]byte
	b := buf[:0]
	for i, e := range d {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(e.Phase), 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, e.At.UnixNano(), 10)
	}
	return string(b)
}

// EncodeDeferredMsg is the message that sends the capsule to the phase and
// cycle of next, the checkpoint the advances deferred names lead to, which
// is not written: the receiving phase decides them again and writes them.
func EncodeDeferredMsg(next *capsule.Checkpoint, deferred []Deferred) *nats.Msg {
	h := jspub.NewHeaders(6)
	deferredHeaders(&h, next, deferred)
	return jspub.NewMsg(PhaseSubject(next.State.Phase), nil, h)
}

// deferredHeaders sets the headers of [EncodeDeferredMsg]: its message's,
// and the pooled one's [Store.SendDeferred] publishes.
func deferredHeaders(h *jspub.Headers, next *capsule.Checkpoint, deferred []Deferred) {
	phaseHeaders(h, next, "")
	h.Set(HeaderDeferred, encodeDeferred(deferred))
}

// PublishDeferred sends a message of [EncodeDeferredMsg] and waits for its
// acknowledgement.
func (s *Store) PublishDeferred(ctx context.Context, m *nats.Msg) error {
	if err := s.publish(ctx, m); err != nil {
		return fmt.Errorf("publish to %s: %w", m.Subject, err)
	}
	return nil
}

// SendDeferred is [Store.PublishDeferred] of EncodeDeferredMsg(next,
// deferred), the message built in a pooled one (jspub.Msg): a deferring
// phase sends one at every hop it does not write, and a message of its own
// cost four allocations more (BenchmarkHopMessages).
func (s *Store) SendDeferred(ctx context.Context, next *capsule.Checkpoint, deferred []Deferred) error {
	p := jspub.GetMsg(PhaseSubject(next.State.Phase), nil)
	deferredHeaders(p.Headers(), next, deferred)
	err := s.PublishDeferred(ctx, p.Msg())
	p.Release()
	return err
}

// canonicalInt reports whether s is v as strconv.FormatInt(v, 10) writes it
// (no sign, no leading zero), without making that string: the decoders of
// every phase message's headers ask it once or twice a message.
func canonicalInt(v int64, s string) bool {
	var b [20]byte
	return string(strconv.AppendInt(b[:0], v, 10)) == s
}
