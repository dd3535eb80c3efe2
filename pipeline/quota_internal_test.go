package pipeline

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLimiter: a producer gets a second's worth at once, then its rate;
// other producers and sagad's own intake are not held back by it; a
// message larger than a second's bytes still passes when the bucket is
// full.
func TestLimiter(t *testing.T) {
	t.Parallel()
	now := time.Unix(1e9, 0)
	l := newLimiter(IntakeRate{Msgs: 10, Bytes: 1000}, func() time.Time { return now })
	for i := range 10 {
		require.Zero(t, l.take("mallory", 10), "message %d of the burst", i)
	}
	d := l.take("mallory", 10)
	require.InDelta(t, 100*time.Millisecond, d, float64(time.Millisecond))
	require.Zero(t, l.take("alice", 10))
	require.Zero(t, l.take("", 1<<20))
	now = now.Add(100 * time.Millisecond)
	require.Zero(t, l.take("mallory", 10))
	require.NotZero(t, l.take("mallory", 10))

	now = now.Add(time.Hour)
	require.Zero(t, l.take("mallory", 5000), "a full bucket lets a large message through")
	d = l.take("mallory", 10)
	require.InDelta(t, 4010*time.Millisecond, d, float64(time.Millisecond), "then it is paid for")

	off := newLimiter(IntakeRate{Msgs: -1, Bytes: -1}, func() time.Time { return now })
	for range 1000 {
		require.Zero(t, off.take("mallory", 1<<20))
	}
}
