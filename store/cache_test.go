package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

// TestCacheTrustsEntriesForLessThanTheRetention: a key can be forgotten and
// accepted again as another capsule once the retention has passed since the
// first one ended, so an entry is trusted for less than the retention (and
// never longer than 10 minutes): after that, a phase reads again.
func TestCacheTrustsEntriesForLessThanTheRetention(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		retention time.Duration
		maxAge    time.Duration
	}{
		{"short retention", 5 * time.Second, 5 * time.Second},
		{"default retention", 168 * time.Hour, cacheMaxAge},
		{"kept for ever", 0, cacheMaxAge},
		{"negative", -time.Second, cacheMaxAge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			now := time.Date(2026, 11, 25, 4, 0, 0, 0, time.UTC)
			c := newCache(tc.retention, func() time.Time { return now })
			raw := []byte(`{"capsule_id":"a"}`)
			dec := &capsule.Capsule{CapsuleID: "a"}
			c.Seed("a", raw, dec)
			c.Put(&capsule.Checkpoint{Key: "a", State: capsule.CheckpointState{Status: capsule.InProgress}}, 7)

			now = now.Add(tc.maxAge - time.Nanosecond)
			_, rev, ok := c.Get("a")
			require.True(t, ok)
			require.Equal(t, uint64(7), rev)
			_, got, ok := c.Capsule("a")
			require.True(t, ok)
			require.Same(t, dec, got)
			_, ok = c.Trusted("a", raw)
			require.True(t, ok)

			now = now.Add(time.Nanosecond)
			_, _, ok = c.Get("a")
			require.False(t, ok, "a checkpoint as old as %v is not trusted", tc.maxAge)
			_, _, ok = c.Capsule("a")
			require.False(t, ok)
			_, ok = c.Trusted("a", raw)
			require.False(t, ok)

			// Writing again makes it fresh again.
			c.Put(&capsule.Checkpoint{Key: "a", State: capsule.CheckpointState{Status: capsule.InProgress}}, 8)
			_, rev, ok = c.Get("a")
			require.True(t, ok)
			require.Equal(t, uint64(8), rev)
		})
	}
}

// TestCacheLendsEachHistoryToOneWriteAtATime: a capsule's kept history is
// found in its entry, lent to one write at a time (a second write of the
// key meanwhile encodes in full), kept across the capsule's checkpoints,
// and dropped with the entry when the capsule ends; one a write still
// holds is not handed to another capsule.
func TestCacheLendsEachHistoryToOneWriteAtATime(t *testing.T) {
	t.Parallel()
	c := newCache(0, time.Now)
	require.Nil(t, c.history("a"), "no entry: the capsule's first write")
	running := func(key string) *capsule.Checkpoint {
		return &capsule.Checkpoint{Key: key, State: capsule.CheckpointState{Status: capsule.InProgress}}
	}
	c.Put(running("a"), 1)
	h := c.history("a")
	require.NotNil(t, h)
	require.Nil(t, c.history("a"), "lent to another write")
	h.done()
	c.Put(running("a"), 2)
	require.Same(t, h, c.history("a"), "kept across the capsule's checkpoints")

	// Held by a write when the capsule ends: not recycled.
	c.Put(&capsule.Checkpoint{Key: "a", State: capsule.CheckpointState{Status: capsule.Completed}}, 3)
	require.Zero(t, c.hists)
	require.True(t, h.busy.Load(), "still the write's")
	h.done()

	// Not held when it ends: recycled, empty and free.
	c.Put(running("b"), 1)
	hb := c.history("b")
	_, err := running("b").AppendJSONKeeping(nil, &hb.enc)
	require.NoError(t, err)
	hb.done()
	c.Put(&capsule.Checkpoint{Key: "b", State: capsule.CheckpointState{Status: capsule.Halted}}, 2)
	require.False(t, hb.busy.Load())
	require.Nil(t, c.history("b"))
}

// TestCacheBoundsKeptHistories: at most maxKeptHistories entries hold a
// history; an evicted entry's is counted out.
func TestCacheBoundsKeptHistories(t *testing.T) {
	t.Parallel()
	c := newCache(0, time.Now)
	for i := range cacheSize + 10 {
		key := fmt.Sprintf("k%d", i)
		c.Put(&capsule.Checkpoint{Key: key, State: capsule.CheckpointState{Status: capsule.InProgress}}, 1)
		if h := c.history(key); h != nil {
			h.done()
		}
		require.LessOrEqual(t, len(c.m), cacheSize)
	}
	n := 0
	for _, e := range c.m {
		if e.hist != nil {
			n++
		}
	}
	require.Equal(t, n, c.hists)
	require.LessOrEqual(t, n, maxKeptHistories)
	require.Positive(t, n)
}

// TestKeptHistorySubject: the subject kept with a history is its capsule's,
// also once the history is recycled for another capsule.
func TestKeptHistorySubject(t *testing.T) {
	t.Parallel()
	var none *keptHistory
	require.Equal(t, "$KV.SAGA_CHECKPOINTS.a", none.subject("a"))
	h := new(keptHistory)
	require.Equal(t, "$KV.SAGA_CHECKPOINTS.a", h.subject("a"))
	require.Equal(t, "$KV.SAGA_CHECKPOINTS.a", h.subject("a"))
	require.Equal(t, "$KV.SAGA_CHECKPOINTS.ab", h.subject("ab"))
	require.Equal(t, "$KV.SAGA_CHECKPOINTS.ba", h.subject("ba"))
	h.buf = make([]byte, 0, maxKeptBuf+1)
	h.recycle()
	require.Nil(t, h.buf)
	require.Empty(t, h.subj)
}

// BenchmarkCachePhase: what a phase asks of the cache (its capsule, its
// checkpoint, the kept history of its write, the checkpoint put back),
// from every core at once over the capsules in flight.
func BenchmarkCachePhase(b *testing.B) {
	c := NewCache()
	const n = 256
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("0f8fad5b-d9cb-469f-a165-%012d", i)
		c.Seed(keys[i], []byte(`{}`), &capsule.Capsule{})
		c.Put(&capsule.Checkpoint{Key: keys[i], State: capsule.CheckpointState{Status: capsule.InProgress}}, 1)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			key := keys[i%n]
			i++
			c.Capsule(key)
			cp, rev, _ := c.Get(key)
			if h := c.history(key); h != nil {
				h.done()
			}
			c.Put(cp, rev+1)
		}
	})
}
