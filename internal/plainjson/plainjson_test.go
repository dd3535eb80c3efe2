package plainjson

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sagad/sagad/internal/differential"
)

// plainPair: a string Plain accepts is written by json.Marshal as it is,
// and an ASCII one json.Marshal writes as it is, Plain accepts (it refuses
// no ASCII it need not). Inputs: every byte alone and between two
// letters, and strings mostly of printable ASCII.
var plainPair = differential.Pair[string, bool]{
	Name: "Plain",
	Fast: func(s string) (bool, error) { return Plain(s), nil },
	Reference: func(s string) (bool, error) {
		b, err := json.Marshal(s)
		return string(b) == `"`+s+`"`, err
	},
	Compare: func(t testing.TB, s string, plain, asIs bool) {
		if plain && !asIs || asIs != plain && ascii(s) {
			t.Fatalf("%q: written as is %v, Plain says %v", s, asIs, plain)
		}
	},
	Seeds: func() []string {
		out := []string{"", "é", "\u2028"}
		for c := range 256 {
			out = append(out, string([]byte{byte(c)}), "a"+string([]byte{byte(c)})+"z")
		}
		return out
	}(),
	Generate: func(rng *rand.Rand) string {
		b := make([]byte, rng.IntN(60))
		for i := range b {
			if rng.IntN(20) == 0 {
				b[i] = byte(rng.UintN(256))
			} else {
				b[i] = byte(0x20 + rng.UintN(0x5f))
			}
		}
		return string(b)
	},
	Count:  20000,
	Decode: func(b []byte) (string, bool) { return string(b), true },
	Encode: func(s string) []byte { return []byte(s) },
}

func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// appendTimePair holds AppendTime to time.Time.MarshalJSON over instants
// across and past its years, with and without nanoseconds and trailing
// zeros, in UTC, Local and zones up to and past 24 hours (where
// MarshalJSON fails, AppendTime must say so and write nothing).
var appendTimePair = differential.Pair[time.Time, string]{
	Name: "AppendTime",
	Fast: func(at time.Time) (string, error) {
		got, ok := AppendTime([]byte("x"), at)
		switch {
		case !ok && string(got) != "x":
			return "", fmt.Errorf("wrote %s where it is not ok", got)
		case !ok:
			return "", errors.New("not ok")
		}
		return string(got[1:]), nil
	},
	Reference: func(at time.Time) (string, error) { b, err := at.MarshalJSON(); return string(b), err },
	Seeds: []time.Time{{}, time.Now(), time.Now().UTC(), time.Unix(0, 0),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(0, 1, 1, 0, 0, 0, 0, time.FixedZone("", 3600))},
	Generate: func(rng *rand.Rand) time.Time {
		var at time.Time
		switch rng.IntN(3) {
		case 0:
			at = time.Unix(rng.Int64N(1<<38)-1<<37, rng.Int64N(1e9))
		case 1:
			at = time.Date(rng.IntN(12000)-1000, time.Month(1+rng.IntN(12)), 1+rng.IntN(28), rng.IntN(24), rng.IntN(60), rng.IntN(60), rng.IntN(1000)*1000, time.UTC)
		default:
			at = time.Now().Add(time.Duration(rng.Int64N(1<<52) - 1<<51)).Round(time.Duration(rng.IntN(4)) * time.Millisecond)
		}
		switch rng.IntN(4) {
		case 0:
			return at.UTC()
		case 1:
			return at.Local()
		case 2:
			return at.In(time.FixedZone("z", rng.IntN(2*26*3600)-26*3600))
		}
		return at.In(time.FixedZone("", 3600*(rng.IntN(49)-24)))
	},
	Count: 20000,
	// Seconds (8 bytes), nanoseconds (4), then a zone in seconds (4;
	// absent: UTC).
	Decode: func(b []byte) (time.Time, bool) {
		if len(b) < 12 {
			return time.Time{}, false
		}
		at := time.Unix(int64(binary.LittleEndian.Uint64(b)), int64(binary.LittleEndian.Uint32(b[8:])%1e9)).UTC()
		if len(b) >= 16 {
			at = at.In(time.FixedZone("z", int(int32(binary.LittleEndian.Uint32(b[12:])))))
		}
		return at, true
	},
	Encode: func(at time.Time) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(at.Unix()))
		b = binary.LittleEndian.AppendUint32(b, uint32(at.Nanosecond()))
		_, off := at.Zone()
		return binary.LittleEndian.AppendUint32(b, uint32(int32(off)))
	},
}

// This package's fast paths, held to what they replace by the shared
// harness.
func TestDifferential(t *testing.T) {
	t.Parallel()
	differential.RunAll(t, differential.Registry{plainPair, appendTimePair})
}

func FuzzPlain(f *testing.F)      { differential.Fuzz(f, plainPair) }
func FuzzAppendTime(f *testing.F) { differential.Fuzz(f, appendTimePair) }
