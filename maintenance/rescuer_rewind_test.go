package maintenance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/store"
)

// TestRescuerAfterTheBucketsSequencesWentBack: the checkpoint bucket's
// stream is replaced by one whose sequences are lower than where the
// rescuer's looks had reached (a server restored from an older backup, a
// bucket deleted and made again). Another writer's capsule written there
// is still found by the next look, and this process's own writes at the
// lower revisions are still noted: the looks start again from the first
// sequence instead of waiting for the stream to pass where they stopped.
func TestRescuerAfterTheBucketsSequencesWentBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	topo := store.Topology{Workspace: t.TempDir()}
	own, err := store.Ensure(ctx, js, topo)
	require.NoError(t, err)
	other, err := store.Open(ctx, js)
	require.NoError(t, err)

	start := time.Now().UTC()
	r := NewRescuer(own, RescuerConfig{Now: func() time.Time { return start }, After: time.Minute, Interval: time.Hour})
	own.Checkpoints.OnWrite(r.wrote)
	t.Cleanup(func() { own.Checkpoints.OnWrite(nil) })

	create := func(st *store.Store, key string, status capsule.State) uint64 {
		t.Helper()
		cp := store.NewCheckpoint(key, key, "t", "", "d", start)
		cp.State.Status = status
		rev, err := st.Checkpoints.Create(ctx, cp)
		require.NoError(t, err)
		return rev
	}
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		create(other, k, capsule.InProgress)
	}
	create(own, "owngate", capsule.WaitingForOperator)
	_, err = r.look(ctx)
	require.NoError(t, err)

	// The bucket as an older backup had it: empty, sequences from 1.
	require.NoError(t, js.DeleteStream(ctx, "KV_"+store.CheckpointsBucket))
	_, err = store.Ensure(ctx, js, topo)
	require.NoError(t, err)
	require.Equal(t, uint64(1), create(other, "lost", capsule.InProgress))
	require.Equal(t, uint64(2), create(own, "owngate", capsule.Completed))

	n, err := r.look(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n, "the look read the bucket again from its first sequence")
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Contains(t, r.last, "lost", "another writer's capsule written after the sequences went back")
	require.NotContains(t, r.gate, "owngate", "this process's write at a lower revision than the one noted still counts")
}

// TestRescuerForgetsACheckpointGone: another writer's checkpoint, found by
// a look, has expired when the rescuer reads it, its marker (which lives
// a second) gone before a look could see it. The rescuer forgets it
// rather than reading it again at every pass for ever, where such keys
// would crowd out, MaxChecks at a time, the capsules that can be rescued.
func TestRescuerForgetsACheckpointGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	other, err := store.Ensure(ctx, js, store.Topology{Workspace: t.TempDir(), Retention: time.Second})
	require.NoError(t, err)

	start := time.Now().UTC()
	clock := start
	r := NewRescuer(other, RescuerConfig{Now: func() time.Time { return clock }, After: time.Minute, Interval: time.Hour})
	cp := store.NewCheckpoint("gone", "gone", "t", "", "d", start)
	cp.State.Status = capsule.Completed
	_, err = other.Checkpoints.Create(ctx, cp)
	require.NoError(t, err)
	_, err = r.look(ctx)
	require.NoError(t, err)
	r.mu.Lock()
	require.Contains(t, r.last, "gone", "a look notes the key; its state is read once quiet")
	r.mu.Unlock()
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		_, _, err := other.Checkpoints.GetLatest(ctx, "gone", nil)
		return errors.Is(err, store.ErrNotFound)
	}, "the ended checkpoint never expired")

	clock = clock.Add(2 * time.Minute)
	r.Rescue(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	require.NotContains(t, r.last, "gone")
}
