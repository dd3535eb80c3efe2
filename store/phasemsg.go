package store

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/metrics"
)

// PhaseMsg is what a phase message may say: the capsule it points to, the
// cycle, and the resume token of the resume that sent it. A phase message is
// only a pointer to the checkpoint; everything else is read from there.
type PhaseMsg struct {
	Key   string
	Cycle int
	// ResumeToken is set on the message a resume sent; only it may take a
	// paused capsule back to in_progress.
	ResumeToken string
	// Deferred are the phases before this one whose advance was decided
	// and not written (HeaderDeferred).
	Deferred []Deferred
	// Claimed is the claim the message's first delivery may adopt
	// (HeaderClaim), nil for none.
	Claimed *Claimed
}

// EncodePhaseMsg is the message that sends the capsule to its current phase;
// token marks a resume. [DecodePhaseMsg] reads it back.
func EncodePhaseMsg(cp *capsule.Checkpoint, token string) *nats.Msg {
	// No body: a phase acts on the bytes RECEPTION kept, never on a
	// message's, so carrying them would only be written (three times on
	// R3), delivered and compared at every hop. On a 3-node cluster the
	// capsule's bytes in each of its six phase messages were a third of
	// what sagad wrote per capsule.
	h := jspub.NewHeaders(6)
	phaseHeaders(&h, cp, token)
	return jspub.NewMsg(PhaseSubject(cp.State.Phase), nil, h)
}

// phaseHeaders sets the headers of EncodePhaseMsg: the key and the cycle,
// which point at the checkpoint, and the capsule id where it is not the key.
// The phase is the subject's and the trace id the checkpoint's: carried in
// every phase message they were read by no one, and cost every hop a header
// encoded, scanned and stored by the server, and decoded by the client
// (about 100 bytes and 9 allocations a message, six messages a capsule).
func phaseHeaders(h *jspub.Headers, cp *capsule.Checkpoint, token string) {
	h.Set(HeaderKey, cp.Key)
	if cp.CapsuleID != "" && cp.CapsuleID != cp.Key {
		h.Set(HeaderCapsuleID, cp.CapsuleID)
	}
	h.Set(HeaderCycle, strconv.Itoa(cp.State.Cycle))
	// No de-duplication id: a second copy of a phase message is harmless
	// (it finds its transition recorded, or loses the compare-and-set), and
	// JetStream keeps every id of the window in memory.
	if token != "" {
		h.Set(HeaderResumeToken, token)
	}
}

// DecodePhaseMsg reads a phase message's headers — the capsule key, the
// cycle and the resume token — and nothing else. A message whose headers
// cannot name a capsule never will, so the error comes with the termination
// cause (one of metrics.TermReasons).
func DecodePhaseMsg(h nats.Header) (m PhaseMsg, cause string, err error) {
	key := h.Get(HeaderKey)
	if key == "" {
		return PhaseMsg{}, metrics.TermNoKey, errors.New("phase message without a capsule key")
	}
	if !ValidKey(key) {
		return PhaseMsg{}, metrics.TermInvalidKey, fmt.Errorf("capsule key %q is no valid KV key", PrintableKey(key))
	}
	c := h.Get(HeaderCycle)
	cycle, err := strconv.Atoi(c)
	if err != nil || cycle < 0 || cycle > 1000 || strconv.Itoa(cycle) != c {
		return PhaseMsg{}, metrics.TermBadHeader, fmt.Errorf("cycle header %q is no cycle number", PrintableKey(c))
	}
	deferred, err := DecodeDeferred(h.Get(HeaderDeferred))
	if err != nil {
		return PhaseMsg{}, metrics.TermBadHeader, err
	}
	claimed, err := DecodeClaimed(h.Get(HeaderClaim))
	if err != nil {
		return PhaseMsg{}, metrics.TermBadHeader, err
	}
	return PhaseMsg{Key: key, Cycle: cycle, ResumeToken: h.Get(HeaderResumeToken), Deferred: deferred, Claimed: claimed}, "", nil
}

// PrintableKey bounds a header value from an untrusted message for logs and
// errors.
func PrintableKey(k string) string {
	if len(k) > 128 {
		k = k[:128] + "…"
	}
	return k
}
