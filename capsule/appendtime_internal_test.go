package capsule

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sagad/sagad/internal/differential"
)

// civilPair: the remembered dates are t.Date's and t.Clock's, for times
// taking turns over a few days (a checkpoint's), over many, and at the
// ends of the range remembered.
var civilPair = differential.Pair[time.Time, [6]int]{
	Name: "Civil",
	Fast: func(tm time.Time) ([6]int, error) {
		y, mo, d, h, mi, s := civil(tm)
		return [6]int{y, int(mo), d, h, mi, s}, nil
	},
	Reference: func(tm time.Time) ([6]int, error) {
		y, mo, d := tm.Date()
		h, mi, s := tm.Clock()
		return [6]int{y, int(mo), d, h, mi, s}, nil
	},
	Seeds: []time.Time{time.Unix(0, 0).UTC(), time.Unix(-1, 0).UTC(), time.Unix(maxDaySec-1, 0).UTC(),
		time.Unix(maxDaySec, 0).UTC(), time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC), time.Date(2100, 3, 1, 0, 0, 0, 0, time.UTC)},
	Generate: func(r *rand.Rand) time.Time {
		if r.IntN(2) == 0 {
			base := time.Date(2026, 11, 25, 23, 59, 59, 0, time.UTC).Unix()
			return time.Unix(base+r.Int64N(3*86400)-86400, r.Int64N(1e9)).UTC()
		}
		return time.Unix(r.Int64N(maxDaySec+86400)-86400, 0).UTC()
	},
	Count: 40000,
	// Seconds (8 bytes) and nanoseconds (4), in UTC.
	Decode: func(b []byte) (time.Time, bool) {
		if len(b) < 12 {
			return time.Time{}, false
		}
		return time.Unix(int64(binary.LittleEndian.Uint64(b)), int64(binary.LittleEndian.Uint32(b[8:])%1e9)).UTC(), true
	},
	Encode: func(tm time.Time) []byte {
		return binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint64(nil, uint64(tm.Unix())), uint32(tm.Nanosecond()))
	},
}

func FuzzCivil(f *testing.F) { differential.Fuzz(f, civilPair) }

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
