package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/store"
)

// record is a composition record's bytes with what store reads of them
// (package compose owns the rest).
func record(t *testing.T, id, producer string, steps, digests []string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"chain_id": id, "producer": producer, "steps": steps, "step_digests": digests})
	require.NoError(t, err)
	return b
}

// refs are steps' ids with their indexes.
func refs(steps ...string) []store.StepRef {
	out := make([]store.StepRef, len(steps))
	for i, id := range steps {
		out[i] = store.StepRef{ID: id, Step: i}
	}
	return out
}

// TestCompositions: a producer's run is created once; its steps are the
// only members; composition ids are per producer, and every producer's
// run 1 of one id is found by the id.
func TestCompositions(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	st, err := store.Ensure(ctx, js, store.Topology{})
	require.NoError(t, err)
	alice := store.RunKey{ID: "c-1", Producer: "alice", Run: 1}
	rec := record(t, "c-1", "alice", []string{"s0", "s1"}, []string{"x", "y"})
	require.NoError(t, st.Compositions.Create(ctx, alice, refs("s0", "s1"), rec))
	require.ErrorIs(t, st.Compositions.Create(ctx, alice, nil, rec), store.ErrCompositionExists)
	got, _, err := st.Compositions.Get(ctx, alice)
	require.NoError(t, err)
	require.JSONEq(t, string(rec), string(got))
	_, _, err = st.Compositions.Get(ctx, store.RunKey{ID: "c-1", Producer: "mallory"})
	require.ErrorIs(t, err, store.ErrNotFound)

	for _, tc := range []struct {
		producer, chain string
		step            int
		id, digest      string
		want            bool
	}{
		{"alice", "c-1", 1, "s1", "y", true},
		{"alice", "c-1", 1, "s1", "x", false},
		{"alice", "c-1", 0, "s1", "x", false},
		{"alice", "c-1", 2, "s2", "y", false},
		{"alice", "c-1", -1, "s0", "x", false},
		{"mallory", "c-1", 0, "s0", "x", false},
		{"alice", "c-2", 0, "s0", "x", false},
	} {
		ok, err := st.Compositions.IsMember(ctx, tc.producer, tc.chain, 1, tc.step, tc.id, tc.digest)
		require.NoError(t, err)
		require.Equal(t, tc.want, ok, "%+v", tc)
	}

	mine := record(t, "c-1", "", []string{"m0", "m1"}, []string{"x", "y"})
	require.NoError(t, st.Compositions.Create(ctx, store.RunKey{ID: "c-1"}, refs("m0", "m1"), mine))
	require.NoError(t, st.Compositions.Create(ctx, store.RunKey{ID: "c-1", Producer: "alice", Run: 2}, nil, rec))
	all, err := st.Compositions.Producers(ctx, "c-1", 10)
	require.NoError(t, err)
	require.Len(t, all, 2, "run 1 of each producer")
	none, err := st.Compositions.Producers(ctx, "c-9", 10)
	require.NoError(t, err)
	require.Empty(t, none)
}

// TestStepIDsReserved: a record's step ids are reserved when it is
// created, the ids an update brings when it is written; no other id, and
// no key an id could not be, is reserved; the listing still reads records
// only.
func TestStepIDsReserved(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	st, err := store.Ensure(ctx, js, store.Topology{})
	require.NoError(t, err)
	id := func(n int) string { return fmt.Sprintf("5a6a%04d-0000-8000-8000-000000000000", n) }
	k := store.RunKey{ID: "c-1", Producer: "alice", Run: 1}
	require.NoError(t, st.Compositions.Create(ctx, k, refs(id(0), id(1)), record(t, "c-1", "alice", []string{id(0), id(1)}, []string{"x", "y"})))
	_, err = st.Compositions.Update(ctx, k, func([]byte) ([]byte, []store.StepRef, error) {
		// A loop's next round.
		return record(t, "c-1", "alice", []string{id(0), id(2)}, []string{"x", "y"}), []store.StepRef{{ID: id(2), Step: 1}}, nil
	})
	require.NoError(t, err)
	for id, want := range map[string]bool{
		id(0): true, id(1): true, id(2): true, id(3): false, "": false, "a.b": false, "step": false,
		strings.ToUpper(id(0)): false, "01ARZ3NDEKTSV4RRFFQ69G5FAV": false,
	} {
		got, err := st.Compositions.IsStepID(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, got, id)
	}
	all, err := st.Compositions.List(ctx, 10)
	require.NoError(t, err)
	require.Len(t, all, 1)

	// An id compose does not draw is not reserved (nor ever looked up).
	other := []string{id(8), "5a6a0009-0000-1000-8000-000000000000"}
	require.NoError(t, st.Compositions.Create(ctx, store.RunKey{ID: "c-2", Producer: "alice"}, refs(other...), record(t, "c-2", "alice", other, []string{"x", "y"})))
	for id, want := range map[string]bool{id(8): true, "5a6a0009-0000-1000-8000-000000000000": false} {
		got, err := st.Compositions.IsStepID(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, got, id)
	}
}

// TestLegacyStepIDs: step ids are version 8 UUIDs now, and a version 4 id
// (what producers draw) costs RECEPTION no read, unless an older sagad's
// version 4 reservation may still live: then version 4 ids are looked up
// until the newest such reservation expires. A store that never scanned
// looks them all up, as before.
func TestLegacyStepIDs(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	const retention = time.Hour
	st, err := store.Ensure(ctx, js, store.Topology{Retention: retention})
	require.NoError(t, err)
	v4 := func(n int) string { return fmt.Sprintf("5a6a%04d-0000-4000-8000-000000000000", n) }
	kv, err := js.KeyValue(ctx, store.CompositionsBucket)
	require.NoError(t, err)
	// An older sagad reserves a version 4 id after this one scanned: this
	// one no longer looks version 4 ids up (so no reservation is read).
	_, err = kv.Put(ctx, "step."+v4(1), []byte(`{"chain_id":"old","producer":"alice","run":1,"step":0}`))
	require.NoError(t, err)
	got, err := st.Compositions.IsStepID(ctx, v4(1))
	require.NoError(t, err)
	require.False(t, got, "a fresh bucket held no version 4 reservation: version 4 ids are not looked up")

	// A sagad that starts on a bucket holding one looks every version 4 id
	// up until it expires.
	next, err := store.Ensure(ctx, js, store.Topology{Retention: retention})
	require.NoError(t, err)
	for id, want := range map[string]bool{v4(1): true, v4(2): false} {
		got, err := next.Compositions.IsStepID(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, got, id)
	}
	// Before the scan (a store opened for tools), all of them are.
	opened, err := store.Open(ctx, js)
	require.NoError(t, err)
	got, err = opened.Compositions.IsStepID(ctx, v4(1))
	require.NoError(t, err)
	require.True(t, got)

	// Its scan times the lookups by the newest reservation and the TTL.
	require.NoError(t, opened.Compositions.ScanLegacy(ctx, retention))
	got, err = opened.Compositions.IsStepID(ctx, v4(1))
	require.NoError(t, err)
	require.True(t, got)
	require.NoError(t, opened.Compositions.ScanLegacy(ctx, time.Nanosecond))
	got, err = opened.Compositions.IsStepID(ctx, v4(1))
	require.NoError(t, err)
	require.True(t, got, "a minute of margin past the TTL")

	// A record of an older sagad run on here reserves its version 4 ids
	// again, and they are looked up.
	require.NoError(t, st.Compositions.Create(ctx, store.RunKey{ID: "c-3", Producer: "alice"}, refs(v4(3)), record(t, "c-3", "alice", []string{v4(3)}, []string{"x"})))
	got, err = st.Compositions.IsStepID(ctx, v4(3))
	require.NoError(t, err)
	require.True(t, got)
}
