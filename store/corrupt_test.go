package store

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/internal/natstest"
)

// TestKeptBytesNotACapsule: bytes under a capsule's own key that are no
// capsule are a value sagad did not write (RECEPTION keeps only capsules
// there); under an intake sequence's x- key they are bad input RECEPTION
// kept verbatim, which sagad did write. A continuation that is no JSON is
// corrupt too.
func TestKeptBytesNotACapsule(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	st, err := Ensure(ctx, js, Topology{})
	require.NoError(t, err)
	for _, key := range []string{"5a6a2b3c-0000-4000-8000-000000000001", "x-17"} {
		_, err := st.capsules.Put(ctx, key, []byte("\x00garbage"))
		require.NoError(t, err)
	}
	_, _, err = st.Kept(ctx, "5a6a2b3c-0000-4000-8000-000000000001")
	require.ErrorIs(t, err, ErrNotACapsule)
	e, ok := corrupt.As(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, corrupt.Capsules, e.Bucket)

	_, _, err = st.Kept(ctx, "x-17")
	require.ErrorIs(t, err, ErrNotACapsule)
	require.NotErrorIs(t, err, corrupt.ErrCorrupt)

	kv, err := js.KeyValue(ctx, ContinuationsBucket)
	require.NoError(t, err)
	_, err = kv.Put(ctx, "k", []byte("garbage"))
	require.NoError(t, err)
	_, err = st.Continuations.Get(ctx, "k")
	require.ErrorIs(t, err, corrupt.ErrCorrupt)
}
