package store

import (
	"context"
	"os"
	"path/filepath"
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

// TestFileRefsStayInWorkspace plays a producer naming files outside the
// workspace: through "..", an absolute path or a symlink that leaves it, a
// file: ref does not resolve; inside it, through a symlinked root included,
// it does, and the root's resolution, kept after the first ref, answers the
// same on every later one.
func TestFileRefsStayInWorkspace(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	real := filepath.Join(base, "real")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(real, "dir"), outside} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	for _, f := range []string{filepath.Join(real, "a.txt"), filepath.Join(real, "dir", "b.txt"), filepath.Join(outside, "secret")} {
		require.NoError(t, os.WriteFile(f, []byte("x"), 0o644))
	}
	require.NoError(t, os.Symlink(filepath.Join(real, "a.txt"), filepath.Join(real, "in-link")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(real, "out-link")))
	require.NoError(t, os.Symlink(outside, filepath.Join(real, "out-dir")))
	require.NoError(t, os.Symlink("../outside/secret", filepath.Join(real, "dir", "rel-out")))
	require.NoError(t, os.Symlink("dir", filepath.Join(real, "dir-link")))
	require.NoError(t, os.Symlink("../a.txt", filepath.Join(real, "dir", "up-in")))
	ws := filepath.Join(base, "ws")
	require.NoError(t, os.Symlink(real, ws))

	for _, workspace := range []string{real, ws} {
		r := &Resolver{workspace: workspace}
		for round := range 2 {
			for ref, want := range map[string]bool{
				"file:a.txt":             true,
				"file:dir/b.txt":         true,
				"file:dir":               true,
				"file:.":                 true,
				"file:dir/../a.txt":      true,
				"file:in-link":           true,
				"file:missing":           false,
				"file:a.txt/x":           false,
				"file:../outside/secret": false,
				"file:" + filepath.Join(outside, "secret"): false,
				"file:out-link":       false,
				"file:out-dir/secret": false,
				"file:out-dir":        false,
				"file:dir/rel-out":    false,
				`file:dir\b.txt`:      false,
				"file:":               false,
			} {
				got, err := r.Exists(context.Background(), ref)
				require.NoError(t, err, ref)
				require.Equal(t, want, got, "%s under %s, round %d", ref, workspace, round)
			}
		}
	}
	// A root moved to point elsewhere while sagad runs is not followed
	// there: refs answer for the root as first resolved.
	moved := filepath.Join(base, "moved")
	require.NoError(t, os.Symlink(real, moved))
	r0 := &Resolver{workspace: moved}
	got, err := r0.Exists(context.Background(), "file:a.txt")
	require.NoError(t, err)
	require.True(t, got)
	require.NoError(t, os.Remove(moved))
	require.NoError(t, os.Symlink(outside, moved))
	for ref, want := range map[string]bool{"file:a.txt": true, "file:secret": false} {
		got, err := r0.Exists(context.Background(), ref)
		require.NoError(t, err)
		require.Equal(t, want, got, ref)
	}
	// A workspace that does not exist yet resolves nothing, and is found once it does.
	later := filepath.Join(base, "later")
	r := &Resolver{workspace: later}
	got, err = r.Exists(context.Background(), "file:a.txt")
	require.NoError(t, err)
	require.False(t, got)
	require.NoError(t, os.Symlink(real, later))
	got, err = r.Exists(context.Background(), "file:a.txt")
	require.NoError(t, err)
	require.True(t, got)
}

// TestKVRefsAsTheKVClient: a kv: ref resolves exactly when the KV client's
// Get finds its key, in a bucket read by direct get, a mirror (whose keys
// are its origin's: read through the KV client) and a bucket that answers
// no direct get, over keys present, never written, deleted, purged and
// invalid.
func TestKVRefsAsTheKVClient(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	origin, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "ORIGIN"})
	require.NoError(t, err)
	nodirect, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "NODIRECT"})
	require.NoError(t, err)
	for _, kv := range []jetstream.KeyValue{origin, nodirect} {
		for _, k := range []string{"present", "deleted", "purged"} {
			_, err := kv.Put(ctx, k, []byte("v"))
			require.NoError(t, err)
		}
		require.NoError(t, kv.Delete(ctx, "deleted"))
		require.NoError(t, kv.Purge(ctx, "purged"))
	}
	st, err := js.Stream(ctx, "KV_NODIRECT")
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	cfg.AllowDirect = false
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	_, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "MIRROR", Mirror: &jetstream.StreamSource{Name: "ORIGIN"}})
	require.NoError(t, err)
	ms, err := js.Stream(ctx, "KV_MIRROR")
	require.NoError(t, err)
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		info, err := ms.Info(ctx)
		return err == nil && info.State.LastSeq == 5 // the origin's five writes
	})
	r := &Resolver{js: js, allowed: map[string]bool{"ORIGIN": true, "MIRROR": true, "NODIRECT": true}}
	for b, direct := range map[string]bool{"ORIGIN": true, "MIRROR": false, "NODIRECT": false} {
		kv, err := js.KeyValue(ctx, b)
		require.NoError(t, err)
		require.Equal(t, direct, directGets(ctx, kv), b)
		for _, k := range []string{"present", "never", "deleted", "purged", "a..b", "a b", ".x"} {
			_, gerr := kv.Get(ctx, k)
			got, err := r.Exists(ctx, "kv:"+b+"/"+k)
			require.NoError(t, err, "%s/%s", b, k)
			require.Equal(t, gerr == nil, got, "%s/%s: the KV client says %v", b, k, gerr)
		}
	}
}
