package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/store"
)

// TestChains: a producer's chain is created once; its steps are the only
// members; chain ids are per producer, and every producer's chain of one id
// is found by the id.
func TestChains(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	st, err := store.Ensure(ctx, js, store.Topology{})
	require.NoError(t, err)
	rec := store.ChainRecord{ChainID: "c-1", Producer: "alice", Digest: "d", Steps: []string{"s0", "s1"}, StepDigests: []string{"x", "y"}, CreatedAt: time.Now().UTC()}
	require.NoError(t, st.Chains.Create(ctx, rec))
	require.ErrorIs(t, st.Chains.Create(ctx, rec), store.ErrChainExists)
	got, err := st.Chains.Get(ctx, "c-1", "alice")
	require.NoError(t, err)
	require.Equal(t, rec.Steps, got.Steps)
	_, err = st.Chains.Get(ctx, "c-1", "mallory")
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
		ok, err := st.Chains.IsMember(ctx, tc.producer, tc.chain, 1, tc.step, tc.id, tc.digest)
		require.NoError(t, err)
		require.Equal(t, tc.want, ok, "%+v", tc)
	}

	mine := rec
	mine.Producer, mine.Steps = "", []string{"m0", "m1"}
	require.NoError(t, st.Chains.Create(ctx, mine))
	all, err := st.Chains.Producers(ctx, "c-1", 10)
	require.NoError(t, err)
	require.Len(t, all, 2)
	none, err := st.Chains.Producers(ctx, "c-9", 10)
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
	id := func(n int) string { return fmt.Sprintf("5a6a%04d-0000-4000-8000-000000000000", n) }
	rec := store.ChainRecord{ChainID: "c-1", Producer: "alice", Digest: "d", Steps: []string{id(0), id(1)}, StepDigests: []string{"x", "y"}, CreatedAt: time.Now().UTC()}
	require.NoError(t, st.Chains.Create(ctx, rec))
	_, err = st.Chains.Update(ctx, "c-1", "alice", 1, func(r *store.ChainRecord) error {
		r.Steps[1] = id(2) // a loop's next round
		return nil
	})
	require.NoError(t, err)
	for id, want := range map[string]bool{
		id(0): true, id(1): true, id(2): true, id(3): false, "": false, "a.b": false, "step": false,
		strings.ToUpper(id(0)): false, "01ARZ3NDEKTSV4RRFFQ69G5FAV": false,
	} {
		got, err := st.Chains.IsStepID(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, got, id)
	}
	all, err := st.Chains.List(ctx, 10)
	require.NoError(t, err)
	require.Len(t, all, 1)

	// An id compose does not draw is not reserved (nor ever looked up).
	other := rec
	other.ChainID, other.Steps = "c-2", []string{id(8), "5a6a0009-0000-1000-8000-000000000000"}
	require.NoError(t, st.Chains.Create(ctx, other))
	for id, want := range map[string]bool{id(8): true, "5a6a0009-0000-1000-8000-000000000000": false} {
		got, err := st.Chains.IsStepID(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, got, id)
	}
}
