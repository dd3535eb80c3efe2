package capsule

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAppendTimeAsMarshalJSON: the UTC fast path writes what
// time.Time.MarshalJSON writes, fractions with trailing zeros and the zero
// time included, and other zones take the general path.
func TestAppendTimeAsMarshalJSON(t *testing.T) {
	t.Parallel()
	times := []time.Time{
		{},
		time.Unix(0, 0).UTC(),
		time.Date(2026, 11, 25, 20, 57, 8, 0, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 100_000_000, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 120_000_000, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 1, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("X", 3600)),
		time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("UTC", 0)),
		time.Now(),
		time.Now().UTC(),
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		times = append(times, time.Unix(r.Int64N(253402300799), r.Int64N(1e9)).UTC())
	}
	for _, tm := range times {
		want, err := tm.MarshalJSON()
		require.NoError(t, err)
		got, err := appendTime(nil, tm)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "%v", tm)
	}
	_, err := appendTime(nil, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))
	require.Error(t, err)
	_, err = appendTime(nil, time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC))
	require.Error(t, err)
}
