package maintenance

import (
	"context"
	"math/bits"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/store"
)

// TestRescuerNotesWithoutTheWatch pins what the rescuer knows without being
// sent every write: its own process's writes are noted as made (one in
// progress timed, one ended forgotten unread, one at the operator gate
// counted at once), every other writer's is found by a look at the bucket
// (each key once, from where the last look stopped), a look skips the
// revisions this process noted already and forgets its own notes as it
// passes them, and a note older than what is known changes nothing.
func TestRescuerNotesWithoutTheWatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	own, err := store.Ensure(ctx, js, store.Topology{Workspace: t.TempDir()})
	require.NoError(t, err)
	other, err := store.Open(ctx, js)
	require.NoError(t, err)

	var mu sync.Mutex
	start := time.Now().UTC()
	clock := start
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	m := metrics.New(prometheus.NewRegistry(), metrics.BuildInfo{})
	r := NewRescuer(own, RescuerConfig{Now: now, After: time.Minute, Interval: time.Hour, Metrics: m})
	own.Checkpoints.OnWrite(r.wrote)
	t.Cleanup(func() { own.Checkpoints.OnWrite(nil) })

	write := func(st *store.Store, key string, statuses ...capsule.State) uint64 {
		t.Helper()
		cp := store.NewCheckpoint(key, key, "t", "", "d", start)
		rev, err := st.Checkpoints.Create(ctx, cp)
		require.NoError(t, err)
		for _, status := range statuses {
			cp.State.Status = status
			rev, err = st.ReplaceCorrupt(ctx, cp, rev) // a checkpoint in a given state, written as is
			require.NoError(t, err)
		}
		return rev
	}
	update := func(st *store.Store, key string, status capsule.State) uint64 {
		t.Helper()
		cp, rev, err := st.Checkpoints.Get(ctx, key)
		require.NoError(t, err)
		cp.State.Status = status
		rev, err = st.ReplaceCorrupt(ctx, cp, rev) // a checkpoint in a given state, written as is
		require.NoError(t, err)
		return rev
	}
	write(own, "ownrunning")
	write(own, "ownended", capsule.Completed)
	write(own, "owngate", capsule.WaitingForOperator)
	write(other, "otherrunning", capsule.InProgress, capsule.InProgress)
	write(other, "othergate", capsule.WaitingForOperator)
	write(own, "endedelsewhere")
	endedElsewhere := update(other, "endedelsewhere", capsule.Halted)

	r.mu.Lock()
	require.ElementsMatch(t, []string{"ownrunning", "endedelsewhere"}, keys(r.last), "own writes: only those in progress are timed")
	require.ElementsMatch(t, []string{"owngate"}, keys(r.gate))
	require.Equal(t, 6, r.own.len(), "every own revision, until the look reaches it")
	r.mu.Unlock()

	n, err := r.look(ctx)
	require.NoError(t, err)
	require.Equal(t, 6, n, "one entry a key: the bucket keeps a key's last revision")
	r.mu.Lock()
	require.ElementsMatch(t, []string{"ownrunning", "otherrunning", "othergate", "endedelsewhere"}, keys(r.last),
		"others' writes are known by key and time, their state read once quiet; own ones noted already")
	require.Equal(t, endedElsewhere, r.last["endedelsewhere"].rev)
	require.Zero(t, r.own.len(), "the look reached every own revision")
	r.mu.Unlock()
	n, err = r.look(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a look starts where the last one stopped")

	// A note older than what is known: a late report of an earlier write.
	r.wrote(&capsule.Checkpoint{Key: "otherrunning", State: capsule.CheckpointState{Status: capsule.Completed}}, 1)
	// A write reported after a look passed it: no mark left for a look.
	r.wrote(&capsule.Checkpoint{Key: "reportedlate", State: capsule.CheckpointState{Status: capsule.Completed}}, 2)
	r.mu.Lock()
	require.Contains(t, r.last, "otherrunning", "an older revision forgets nothing")
	require.NotContains(t, r.last, "reportedlate")
	r.mu.Unlock()

	mu.Lock()
	clock = clock.Add(2 * time.Minute)
	mu.Unlock()
	r.Rescue(ctx)
	r.mu.Lock()
	require.ElementsMatch(t, []string{"ownrunning", "otherrunning"}, keys(r.last), "read once quiet: the ended ones forgotten")
	require.ElementsMatch(t, []string{"owngate", "othergate"}, keys(r.gate))
	r.mu.Unlock()
	gate, ok := m.AwaitingOperatorCount()
	require.True(t, ok)
	require.Equal(t, 2, gate)

	// A change by another writer takes a capsule out of the gate's count.
	update(other, "owngate", capsule.Completed)
	_, err = r.look(ctx)
	require.NoError(t, err)
	r.countGate()
	gate, _ = m.AwaitingOperatorCount()
	require.Equal(t, 1, gate)
}

// len is how many sequences s holds.
func (s *seqSet) len() int {
	n := 0
	for _, w := range s.words {
		n += bits.OnesCount64(w)
	}
	return n
}

// TestSeqSet: sequences added are taken once, a look's passing forgets
// those below it, and the set stops growing at its bound.
func TestSeqSet(t *testing.T) {
	t.Parallel()
	s := seqSet{base: 1}
	for _, q := range []uint64{1, 2, 64, 65, 66, 200, 1000} {
		s.add(q)
	}
	require.True(t, s.take(65))
	require.False(t, s.take(65), "taken once")
	require.False(t, s.take(3))
	s.add(129)
	s.add(131)
	s.forgetBelow(130)
	require.False(t, s.take(129), "below the look: forgotten")
	require.True(t, s.take(131), "from the look on: kept")
	require.False(t, s.take(66), "below the look: forgotten")
	require.False(t, s.take(64))
	require.True(t, s.take(200))
	require.True(t, s.take(1000))
	s.forgetBelow(5000)
	require.Zero(t, s.len())
	s.add(s.base - 1) // below base: a look has passed it
	require.Zero(t, s.len())
	s.add(s.base + 64*maxSeqWords)
	require.Zero(t, s.len(), "beyond the bound: not recorded")
	s.add(s.base + 64*maxSeqWords - 1)
	require.Equal(t, 1, s.len())
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
