package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/store"
)

func TestDeferredMsgRoundTrip(t *testing.T) {
	t.Parallel()
	cp := &capsule.Checkpoint{Key: "0f8fad5b-d9cb-469f-a165-70867728950e", CapsuleID: "c1", TraceID: "t1"}
	cp.State.Phase, cp.State.Cycle = capsule.AutomatedGates, 1
	at := time.Unix(1_700_000_000, 123).UTC()
	d := []store.Deferred{{Phase: capsule.Planning, At: at}}
	m := store.EncodeDeferredMsg(cp, d)
	require.Equal(t, store.PhaseSubject(capsule.AutomatedGates), m.Subject)
	require.Empty(t, m.Data)
	got, cause, err := store.DecodePhaseMsg(m.Header)
	require.NoError(t, err)
	require.Empty(t, cause)
	require.Equal(t, store.PhaseMsg{Key: cp.Key, Cycle: 1, Deferred: d}, got)
}

func TestDecodeDeferredRefuses(t *testing.T) {
	t.Parallel()
	for _, v := range []string{
		"x", "2", "2:", ":5", "0:5", "6:5", "7:5", "-2:5", "02:5", "2:05", "2:-5", "2:0", "2:+5",
		"3:5,2:5", "2:5,2:5", "2:5,", ",2:5", "1:1,2:1,3:1,4:1,5:1,5:1", "2:99999999999999999999",
	} {
		_, err := store.DecodeDeferred(v)
		require.ErrorIs(t, err, store.ErrBadDeferred, "%q", v)
	}
	d, err := store.DecodeDeferred("2:5,3:6")
	require.NoError(t, err)
	require.Equal(t, []store.Deferred{{Phase: 2, At: time.Unix(0, 5).UTC()}, {Phase: 3, At: time.Unix(0, 6).UTC()}}, d)
}

// FuzzDecodeDeferred: whatever a Saga-Deferred header says, the decoder
// either refuses it with ErrBadDeferred or returns phases strictly between
// RECEPTION and HANDOFF, ascending, with positive times, that encode back
// to the same header.
func FuzzDecodeDeferred(f *testing.F) {
	for _, s := range []string{"", "2:1700000000000000000", "2:5,3:6", "1:1,2:1,3:1,4:1,5:1", "3:5,2:5", "2:", "x", "2:05"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, err := store.DecodeDeferred(v)
		if err != nil {
			if !errors.Is(err, store.ErrBadDeferred) {
				t.Fatalf("%q: %v is no ErrBadDeferred", v, err)
			}
			return
		}
		for i, e := range d {
			if e.Phase <= capsule.Reception || e.Phase >= capsule.Handoff || e.At.UnixNano() <= 0 || (i > 0 && e.Phase <= d[i-1].Phase) {
				t.Fatalf("%q: accepted %+v", v, d)
			}
		}
		cp := &capsule.Checkpoint{Key: "k"}
		cp.State.Phase = capsule.Execution
		if len(d) > 0 {
			m := store.EncodeDeferredMsg(cp, d)
			if got := m.Header.Get(store.HeaderDeferred); got != v {
				t.Fatalf("%q encodes back as %q", v, got)
			}
		}
	})
}
