package plainjson

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"
)

// TestPlainAsMarshal: a string Plain accepts is written by json.Marshal as
// it is, and an ASCII one json.Marshal writes as it is, Plain accepts (it
// refuses no ASCII it need not).
func TestPlainAsMarshal(t *testing.T) {
	t.Parallel()
	check := func(s string) {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		asIs := string(b) == `"`+s+`"`
		if Plain(s) && !asIs || asIs != Plain(s) && ascii(s) {
			t.Fatalf("%q: written as %s, Plain says %v", s, b, Plain(s))
		}
	}
	for c := range 256 {
		check(string([]byte{byte(c)}))
		check("a" + string([]byte{byte(c)}) + "z")
	}
	check("")
	check("é")
	check("\u2028")
	rng := rand.New(rand.NewPCG(24, 6))
	for range 20000 {
		b := make([]byte, rng.IntN(60))
		for i := range b {
			if rng.IntN(20) == 0 {
				b[i] = byte(rng.UintN(256))
			} else {
				b[i] = byte(0x20 + rng.UintN(0x5f))
			}
		}
		check(string(b))
	}
}

func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// TestAppendTimeAsMarshalJSON holds AppendTime to time.Time.MarshalJSON
// over instants across and past its years, with and without nanoseconds
// and trailing zeros, in UTC, Local and zones up to and past 24 hours
// (where MarshalJSON fails, AppendTime must say so).
func TestAppendTimeAsMarshalJSON(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(24, 7))
	zone := func() *time.Location {
		switch rng.IntN(4) {
		case 0:
			return time.UTC
		case 1:
			return time.Local
		case 2:
			return time.FixedZone("z", rng.IntN(2*26*3600)-26*3600)
		}
		return time.FixedZone("", 3600*(rng.IntN(49)-24))
	}
	times := []time.Time{{}, time.Now(), time.Now().UTC(), time.Unix(0, 0),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(0, 1, 1, 0, 0, 0, 0, time.FixedZone("", 3600))}
	for range 20000 {
		var at time.Time
		switch rng.IntN(3) {
		case 0:
			at = time.Unix(rng.Int64N(1<<38)-1<<37, rng.Int64N(1e9))
		case 1:
			at = time.Date(rng.IntN(12000)-1000, time.Month(1+rng.IntN(12)), 1+rng.IntN(28), rng.IntN(24), rng.IntN(60), rng.IntN(60), rng.IntN(1000)*1000, time.UTC)
		default:
			at = time.Now().Add(time.Duration(rng.Int64N(1<<52) - 1<<51)).Round(time.Duration(rng.IntN(4)) * time.Millisecond)
		}
		times = append(times, at.In(zone()))
	}
	for _, at := range times {
		want, err := at.MarshalJSON()
		got, ok := AppendTime([]byte("x"), at)
		if ok != (err == nil) {
			t.Fatalf("%v: ok %v, MarshalJSON's error %v", at, ok, err)
		}
		if ok && string(got) != "x"+string(want) {
			t.Fatalf("%v: %s, want x%s", at, got, want)
		}
		if !ok && string(got) != "x" {
			t.Fatalf("%v: wrote %s where it is not ok", at, got)
		}
	}
}
