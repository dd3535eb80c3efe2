package jspub_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/internal/natstest"
)

// TestMutate: concurrent writers of one key each land exactly once (a lost
// compare-and-set reads again and changes again), Keep writes nothing and
// Delete removes the key.
func TestMutate(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "MUTATE"})
	require.NoError(t, err)
	read := func(ctx context.Context) (int, uint64, error) {
		e, err := kv.Get(ctx, "n")
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return 0, 0, nil
		}
		if err != nil {
			return 0, 0, err
		}
		var n int
		return n, e.Revision(), json.Unmarshal(e.Value(), &n)
	}
	const writers = 8
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			_, _, err := jspub.Mutate(ctx, kv, nil, "n", read, func(n int) (int, jspub.Op, error) { return n + 1, jspub.Put, nil })
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	n, rev, err := jspub.Mutate(ctx, kv, nil, "n", read, func(n int) (int, jspub.Op, error) { return n + 100, jspub.Keep, nil })
	require.NoError(t, err)
	require.Equal(t, writers, n, "Keep returns the value read")
	require.Equal(t, uint64(writers), rev, "and writes nothing")
	_, rev, err = jspub.Mutate(ctx, kv, nil, "n", read, func(int) (int, jspub.Op, error) { return 0, jspub.Delete, nil })
	require.NoError(t, err)
	require.Zero(t, rev)
	_, err = kv.Get(ctx, "n")
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound)
	// Over the delete marker, a Put creates the key again.
	n, _, err = jspub.Mutate(ctx, kv, nil, "n", read, func(n int) (int, jspub.Op, error) { return n + 1, jspub.Put, nil })
	require.NoError(t, err)
	require.Equal(t, 1, n)
}
