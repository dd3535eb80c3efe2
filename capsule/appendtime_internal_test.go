package capsule

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCivilAsDateAndClock: the remembered dates are t.Date's, for times
// taking turns over a few days (a checkpoint's), over many, and at the
// ends of the range remembered.
func TestCivilAsDateAndClock(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	base := time.Date(2026, 11, 25, 23, 59, 59, 0, time.UTC).Unix()
	var times []time.Time
	for range 20000 {
		times = append(times,
			time.Unix(base+r.Int64N(3*86400)-86400, r.Int64N(1e9)).UTC(),
			time.Unix(r.Int64N(maxDaySec+86400)-86400, 0).UTC())
	}
	times = append(times, time.Unix(0, 0).UTC(), time.Unix(-1, 0).UTC(), time.Unix(maxDaySec-1, 0).UTC(),
		time.Unix(maxDaySec, 0).UTC(), time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC), time.Date(2100, 3, 1, 0, 0, 0, 0, time.UTC))
	for _, tm := range times {
		y, mo, d, h, mi, s := civil(tm)
		wy, wmo, wd := tm.Date()
		wh, wmi, ws := tm.Clock()
		require.Equal(t, [6]int{wy, int(wmo), wd, wh, wmi, ws}, [6]int{y, int(mo), d, h, mi, s}, "%v", tm)
	}
}

// BenchmarkAppendTime: a checkpoint's dozen times, of two days.
func BenchmarkAppendTime(b *testing.B) {
	at := time.Date(2026, 11, 25, 23, 59, 58, 123456789, time.UTC)
	var ts [12]time.Time
	for i := range ts {
		ts[i] = at.Add(time.Duration(i) * 317 * time.Millisecond)
	}
	var buf []byte
	for b.Loop() {
		buf = buf[:0]
		for _, t := range ts {
			buf, _ = appendTime(buf, t)
		}
	}
}
