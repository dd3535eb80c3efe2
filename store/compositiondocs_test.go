package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/store"
)

// TestCompositionDocs: a loop document is kept per producer, id and digest,
// beside the run's record without being listed as one; a digest that is
// not one is refused.
func TestCompositionDocs(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	st, err := store.Ensure(ctx, js, store.Topology{})
	require.NoError(t, err)
	d1, d2 := strings.Repeat("a", 64), strings.Repeat("b", 64)
	require.NoError(t, st.Compositions.PutDoc(ctx, "c", "alice", d1, []byte(`{"one":1}`)))
	require.NoError(t, st.Compositions.PutDoc(ctx, "c", "alice", d2, []byte(`{"two":2}`)))
	b, err := st.Compositions.Doc(ctx, "c", "alice", d1)
	require.NoError(t, err)
	require.JSONEq(t, `{"one":1}`, string(b))
	_, err = st.Compositions.Doc(ctx, "c", "mallory", d1)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.ErrorIs(t, st.Compositions.PutDoc(ctx, "c", "alice", "../x", nil), store.ErrBadDigest)
	_, err = st.Compositions.Doc(ctx, "c", "alice", strings.Repeat("A", 64))
	require.ErrorIs(t, err, store.ErrBadDigest)

	require.NoError(t, st.Compositions.Create(ctx, store.RunKey{ID: "c", Producer: "alice"}, refs("s0"), record(t, "c", "alice", []string{"s0"}, []string{"x"})))
	all, err := st.Compositions.List(ctx, 10)
	require.NoError(t, err)
	require.Len(t, all, 1, "a document is no record")
	ps, err := st.Compositions.Producers(ctx, "c", 10)
	require.NoError(t, err)
	require.Len(t, ps, 1)
}
