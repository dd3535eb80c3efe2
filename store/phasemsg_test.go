package store_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/store"
)

func TestPhaseMsgRoundTrip(t *testing.T) {
	t.Parallel()
	cp := &capsule.Checkpoint{Key: "0f8fad5b-d9cb-469f-a165-70867728950e", CapsuleID: "c1", TraceID: "t1"}
	cp.State.Phase, cp.State.Cycle = capsule.Execution, 3
	for _, token := range []string{"", "tok1"} {
		m := store.EncodePhaseMsg(cp, token)
		require.Equal(t, store.PhaseSubject(capsule.Execution), m.Subject)
		require.Empty(t, m.Data)
		got, cause, err := store.DecodePhaseMsg(m.Header)
		require.NoError(t, err)
		require.Empty(t, cause)
		require.Equal(t, store.PhaseMsg{Key: cp.Key, Cycle: 3, ResumeToken: token}, got)
	}
	// A bad Saga-Claim header ends the message as a bad header, as a bad
	// Saga-Deferred does.
	m := store.EncodePhaseMsg(cp, "")
	m.Header.Set(store.HeaderClaim, "05:h")
	_, cause, err := store.DecodePhaseMsg(m.Header)
	require.ErrorIs(t, err, store.ErrBadClaimed)
	require.Equal(t, metrics.TermBadHeader, cause)
	m.Header.Set(store.HeaderClaim, "5:h")
	got, _, err := store.DecodePhaseMsg(m.Header)
	require.NoError(t, err)
	require.Equal(t, &store.Claimed{Holder: "h", ExpiresAt: time.Unix(0, 5).UTC()}, got.Claimed)
}

// FuzzDecodePhaseMsg: whatever headers a phase message carries, the decoder
// either names a capsule by a valid key and a canonical cycle number, or
// refuses with one of the closed set of termination causes.
func FuzzDecodePhaseMsg(f *testing.F) {
	f.Add("0f8fad5b-d9cb-469f-a165-70867728950e", "1", "")
	f.Add("x-12", "0", "tok")
	f.Add("", "1", "")
	f.Add("*", "1", "")
	f.Add("../x", "1", "")
	f.Add("k", "01", "")
	f.Add("k", "+1", "")
	f.Add("k", "-1", "")
	f.Add("k", "99999999999999999999", "")
	f.Fuzz(func(t *testing.T, key, cycle, token string) {
		h := nats.Header{}
		if key != "" {
			h.Set(store.HeaderKey, key)
		}
		h.Set(store.HeaderCycle, cycle)
		if token != "" {
			h.Set(store.HeaderResumeToken, token)
		}
		m, cause, err := store.DecodePhaseMsg(h)
		if err != nil {
			if !slices.Contains(metrics.TermReasons, cause) {
				t.Fatalf("cause %q is not a termination reason", cause)
			}
			return
		}
		if cause != "" || !store.ValidKey(m.Key) || m.Key != key {
			t.Fatalf("accepted key %q (from %q) with cause %q", m.Key, key, cause)
		}
		if strconv.Itoa(m.Cycle) != cycle || m.Cycle < 0 {
			t.Fatalf("accepted cycle %d from %q", m.Cycle, cycle)
		}
		if m.ResumeToken != h.Get(store.HeaderResumeToken) {
			t.Fatalf("resume token %q, header %q", m.ResumeToken, token)
		}
	})
}
