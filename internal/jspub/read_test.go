package jspub_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/differential"
	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/internal/natstest"
)

// sameAsGet asks key of kv through r and through the KV client's Get and
// fails unless both answer the same: value, revision, and not found or
// invalid key alike.
func sameAsGet(t *testing.T, r *jspub.KVReader, kv jetstream.KeyValue, key string) {
	t.Helper()
	ctx := context.Background()
	v, rev, err := r.Get(ctx, key)
	e, gerr := kv.Get(ctx, key)
	for _, want := range []error{jetstream.ErrKeyNotFound, jetstream.ErrInvalidKey} {
		require.Equal(t, errors.Is(gerr, want), errors.Is(err, want), "key %q: %v, the KV client's %v", key, err, gerr)
	}
	require.Equal(t, gerr == nil, err == nil, "key %q: %v, the KV client's %v", key, err, gerr)
	if gerr == nil {
		require.Equal(t, string(e.Value()), string(v), "key %q", key)
		require.Equal(t, e.Revision(), rev, "key %q", key)
	}
}

// TestKVReaderAsGet holds the direct read to the KV client's Get on a real
// server over every state a key can be in: never written, written,
// rewritten, deleted, purged, purged with a marker that expires, expired
// by its own TTL (the server's MaxAge marker), markers that are not a
// KV client's, invalid keys, and a random history of writes.
func TestKVReaderAsGet(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc, js := natstest.Connect(t, srv)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "RD", Storage: jetstream.FileStorage, LimitMarkerTTL: time.Second})
	require.NoError(t, err)
	r := jspub.NewKVReader(nc, kv, nil, true)

	sameAsGet(t, r, kv, "never")
	_, err = kv.Put(ctx, "k", []byte("v1"))
	require.NoError(t, err)
	sameAsGet(t, r, kv, "k")
	_, err = kv.Put(ctx, "k", nil) // an empty value is a value
	require.NoError(t, err)
	sameAsGet(t, r, kv, "k")
	_, err = kv.Put(ctx, "k", []byte("v2"))
	require.NoError(t, err)
	sameAsGet(t, r, kv, "k")
	require.NoError(t, kv.Delete(ctx, "k"))
	sameAsGet(t, r, kv, "k")
	_, err = kv.Put(ctx, "p", []byte("v"))
	require.NoError(t, err)
	require.NoError(t, kv.Purge(ctx, "p"))
	sameAsGet(t, r, kv, "p")
	_, err = kv.Put(ctx, "pt", []byte("v"))
	require.NoError(t, err)
	require.NoError(t, kv.Purge(ctx, "pt", jetstream.PurgeTTL(time.Second)))
	sameAsGet(t, r, kv, "pt")

	// Headers on a key that no KV client wrote: an unknown operation or
	// marker reason is a value to both.
	for i, h := range []map[string]string{
		{"KV-Operation": "OTHER"},
		{jetstream.MarkerReasonHeader: "Other"},
		{jetstream.MarkerReasonHeader: "MaxAge"},
		{jetstream.MarkerReasonHeader: "Remove"},
		{jetstream.MarkerReasonHeader: "Purge"},
		{"KV-Operation": "PUT", jetstream.MarkerReasonHeader: "MaxAge"},
		{"KV-Operation": "DEL", "X": "y"},
	} {
		m := nats.NewMsg("$KV.RD.h" + string(rune('a'+i)))
		m.Data = []byte("raw")
		for k, v := range h {
			m.Header.Set(k, v)
		}
		_, err := js.PublishMsg(ctx, m)
		require.NoError(t, err)
		sameAsGet(t, r, kv, m.Subject[len("$KV.RD."):])
	}

	// A key's own TTL: once it expired the server leaves a MaxAge marker.
	_, err = kv.Create(ctx, "ttl", []byte("v"), jetstream.KeyTTL(time.Second))
	require.NoError(t, err)
	sameAsGet(t, r, kv, "ttl")
	natstest.Eventually(t, 10*time.Second, 50*time.Millisecond, func() bool {
		_, err := kv.Get(ctx, "ttl")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	sameAsGet(t, r, kv, "ttl")

	// A random history over a few keys.
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "b.c", "d/e", "f_g=h", "i-j"}
	for range 300 {
		key := keys[rng.IntN(len(keys))]
		switch rng.IntN(4) {
		case 0, 1:
			_, err = kv.Put(ctx, key, []byte(strings.Repeat("x", rng.IntN(64))))
		case 2:
			err = kv.Delete(ctx, key)
		case 3:
			err = kv.Purge(ctx, key)
		}
		require.NoError(t, err)
		sameAsGet(t, r, kv, keys[rng.IntN(len(keys))])
	}
}

// TestKVReaderBucketWithoutDirectGet: a bucket whose stream no longer
// answers direct gets is read through the KV client, and a reader told the
// bucket has none never asks.
func TestKVReaderBucketWithoutDirectGet(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc, js := natstest.Connect(t, srv)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "ND", Storage: jetstream.FileStorage})
	require.NoError(t, err)
	_, err = kv.Put(ctx, "k", []byte("v"))
	require.NoError(t, err)
	s, err := js.Stream(ctx, "KV_ND")
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.AllowDirect = false
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	kv, err = js.KeyValue(ctx, "ND")
	require.NoError(t, err)
	for _, direct := range []bool{true, false} {
		r := jspub.NewKVReader(nc, kv, &jspub.Writes{Timeout: 2 * time.Second}, direct)
		start := time.Now()
		for _, key := range []string{"k", "none", "..bad"} {
			sameAsGet(t, r, kv, key)
		}
		require.Less(t, time.Since(start), time.Second, "direct %v: a read waited for its deadline", direct)
	}
}

// TestKVReaderDeadline: a read with no time left fails as a context's
// deadline does, without a request; a cancelled context fails at once.
func TestKVReaderDeadline(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc, js := natstest.Connect(t, srv)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "DL", Storage: jetstream.FileStorage})
	require.NoError(t, err)
	r := jspub.NewKVReader(nc, kv, nil, true)
	past, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	_, _, err = r.Get(past, "k")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	gone, cancel2 := context.WithCancel(ctx)
	cancel2()
	_, _, err = r.Get(gone, "k")
	require.ErrorIs(t, err, context.Canceled)
}

// validKeyRule is the KV client's rule for a key, as its documentation
// states it.
var validKeyRule = regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)

// validKeyPair holds ValidKey to the KV client's own check (its
// ErrInvalidKey, given before any request) over every byte and random
// strings of the characters that matter.
var validKeyPair = differential.Pair[string, bool]{
	Name: "ValidKey",
	Fast: func(k string) (bool, error) { return jspub.ValidKey(k), nil },
	Reference: func(k string) (bool, error) {
		return k != "" && k[0] != '.' && k[len(k)-1] != '.' && !strings.Contains(k, "..") && validKeyRule.MatchString(k), nil
	},
	Seeds: func() (keys []string) {
		for b := range 256 {
			keys = append(keys, string(rune(b)), "a"+string([]byte{byte(b)})+"b", string([]byte{byte(b)}))
		}
		return keys
	}(),
	Generate: func(rng *rand.Rand) string {
		alphabet := []rune("ab.-/_=*> Z9\x00é.")
		var sb strings.Builder
		for range rng.IntN(8) {
			sb.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		return sb.String()
	},
	Count:  20000,
	Decode: func(b []byte) (string, bool) { return string(b), true },
	Encode: func(s string) []byte { return []byte(s) },
}

func TestDifferentialExternal(t *testing.T) {
	t.Parallel()
	differential.RunAll(t, differential.Registry{validKeyPair})
}

// FuzzValidKey runs validKeyPair on the fuzzer's keys.
func FuzzValidKey(f *testing.F) { differential.Fuzz(f, validKeyPair) }

// TestValidKeyAsKVGet: the same against the KV client itself on a server,
// for a sample (each valid key is a request).
func TestValidKeyAsKVGet(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc, js := natstest.Connect(t, srv)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "VK", Storage: jetstream.FileStorage})
	require.NoError(t, err)
	r := jspub.NewKVReader(nc, kv, nil, true)
	for _, k := range []string{"", ".", "a.", ".a", "a..b", "a.b", "a b", "a*", "a>", "é", "a\x00", "A-z_0=9/x", "-", "/", "="} {
		sameAsGet(t, r, kv, k)
	}
}

func BenchmarkKVGet(b *testing.B) {
	srv := natstest.RunServer(b)
	nc, js := natstest.Connect(b, srv)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "BG", Storage: jetstream.FileStorage})
	require.NoError(b, err)
	_, err = kv.Put(ctx, "locks.0123456789abcdef", []byte(`{"holder":"h","expires_at":"2026-01-01T00:00:00Z"}`))
	require.NoError(b, err)
	b.Run("client", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			rctx, cancel := jspub.ReadCtx(ctx, nil)
			_, err := kv.Get(rctx, "locks.0123456789abcdef")
			cancel()
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		r := jspub.NewKVReader(nc, kv, nil, true)
		b.ReportAllocs()
		for range b.N {
			if _, _, err := r.Get(ctx, "locks.0123456789abcdef"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
