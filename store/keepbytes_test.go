package store

import (
	"context"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/internal/natstest"
)

// TestKeepBytesOnce: RECEPTION's bytes are kept once (a redelivered intake
// message finds them and must not erase what the first delivery recorded),
// a key over a delete marker is taken over, and every write is reported
// under the capsules bucket.
func TestKeepBytesOnce(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	var mu sync.Mutex
	targets := map[string]int{}
	st, err := Ensure(ctx, js, Topology{Writes: &jspub.Writes{Observe: func(target string, err error) {
		mu.Lock()
		defer mu.Unlock()
		targets[target]++
	}}})
	require.NoError(t, err)
	const key = "5a6a2b3c-0000-4000-8000-000000000002"
	require.NoError(t, st.KeepBytes(ctx, key, []byte(`{"a":1}`)))
	err = st.KeepBytes(ctx, key, []byte(`{"a":2}`))
	require.ErrorIs(t, err, jetstream.ErrKeyExists)
	e, err := st.capsules.Get(ctx, key)
	require.NoError(t, err)
	require.JSONEq(t, `{"a":1}`, string(e.Value()))

	require.NoError(t, st.capsules.Delete(ctx, key))
	require.NoError(t, st.KeepBytes(ctx, key, []byte(`{"a":3}`)))
	e, err = st.capsules.Get(ctx, key)
	require.NoError(t, err)
	require.JSONEq(t, `{"a":3}`, string(e.Value()))

	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, targets[CapsulesBucket], 3, "%v", targets)
}
