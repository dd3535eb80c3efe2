package store

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/natstest"
)

// TestKVRefsOnlyInListedBuckets plays a producer probing buckets it was
// not given: a kv: ref resolves only in a listed bucket, and a ref to any
// other bucket (sagad's own checkpoints included) answers the same whether
// its key exists or not.
func TestKVRefsOnlyInListedBuckets(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, b := range []string{"CONFIG", "OTHER", CheckpointsBucket} {
		kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b})
		require.NoError(t, err)
		_, err = kv.Put(ctx, "present", []byte("v"))
		require.NoError(t, err)
	}
	r := &Resolver{js: js, allowed: map[string]bool{"CONFIG": true}}
	for ref, want := range map[string]bool{
		"kv:CONFIG/present":                    true,
		"kv:CONFIG/absent":                     false,
		"kv:OTHER/present":                     false,
		"kv:OTHER/absent":                      false,
		"kv:" + CheckpointsBucket + "/present": false,
		"kv:" + CheckpointsBucket + "/absent":  false,
		"kv:NOPE/absent":                       false,
	} {
		got, err := r.Exists(ctx, ref)
		require.NoError(t, err, ref)
		require.Equal(t, want, got, ref)
	}
	// The default lists no bucket.
	got, err := (&Resolver{js: js}).Exists(ctx, "kv:CONFIG/present")
	require.NoError(t, err)
	require.False(t, got)
}
