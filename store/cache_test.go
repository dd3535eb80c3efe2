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

// BenchmarkCachePhase: what a phase asks of the cache (its capsule, its
// checkpoint, the checkpoint put back), from every core at once over the
// capsules in flight.
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
			c.Put(cp, rev+1)
		}
	})
}

// TestCacheOnTheRealClock: on the real clock (ages by time.Since) an entry
// is trusted while it is younger than the retention, and not after.
func TestCacheOnTheRealClock(t *testing.T) {
	t.Parallel()
	cp := &capsule.Checkpoint{Key: "a", State: capsule.CheckpointState{Status: capsule.InProgress}}
	c := NewCache()
	c.Put(cp, 3)
	got, rev, ok := c.Get("a")
	require.True(t, ok)
	require.Same(t, cp, got)
	require.Equal(t, uint64(3), rev)

	short := newCache(50*time.Millisecond, nil)
	before := time.Now()
	short.Put(cp, 3)
	after := time.Now()
	for {
		sincePut := time.Since(after) // at most the entry's age at Get
		if _, _, ok := short.Get("a"); !ok {
			break
		}
		require.Less(t, sincePut, 50*time.Millisecond, "trusted past the retention")
	}
	require.GreaterOrEqual(t, time.Since(before), 50*time.Millisecond, "forgotten before the retention")
}
