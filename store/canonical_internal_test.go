package store

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/differential"
)

// canonicalIn is a number a header decoder parsed and the text it parsed
// it from.
type canonicalIn struct {
	V int64
	S string
}

// canonicalIntPair holds canonicalInt to the comparison it replaces in the
// Saga-Deferred and Saga-Claim decoders, strconv.FormatInt(v, 10) == s.
var canonicalIntPair = differential.Pair[canonicalIn, bool]{
	Name:      "CanonicalInt",
	Fast:      func(in canonicalIn) (bool, error) { return canonicalInt(in.V, in.S), nil },
	Reference: func(in canonicalIn) (bool, error) { return strconv.FormatInt(in.V, 10) == in.S, nil },
	Seeds: []canonicalIn{
		{5, "5"}, {5, "05"}, {5, "+5"}, {5, "5 "}, {0, "0"}, {0, "-0"}, {-5, "-5"}, {1700000000000000123, "1700000000000000123"},
		{math.MaxInt64, "9223372036854775807"}, {math.MinInt64, "-9223372036854775808"}, {12, "21"}, {1, ""},
	},
	Generate: func(r *rand.Rand) canonicalIn {
		v := r.Int64() >> r.IntN(64)
		if r.IntN(2) == 0 {
			v = -v
		}
		s := strconv.FormatInt(v, 10)
		switch r.IntN(4) {
		case 0:
			s = "0" + s
		case 1:
			s = "+" + s
		case 2:
			if len(s) > 1 {
				s = s[:len(s)-1]
			}
		}
		return canonicalIn{v, s}
	},
	Decode: func(b []byte) (canonicalIn, bool) {
		if len(b) < 8 {
			return canonicalIn{}, false
		}
		return canonicalIn{int64(binary.LittleEndian.Uint64(b)), string(b[8:])}, true
	},
	Encode: func(in canonicalIn) []byte {
		return append(binary.LittleEndian.AppendUint64(nil, uint64(in.V)), in.S...)
	},
}

// FuzzCanonicalInt: canonicalInt agrees with FormatInt's text on any
// number and bytes (canonicalIntPair).
func FuzzCanonicalInt(f *testing.F) { differential.Fuzz(f, canonicalIntPair) }

// TestHeaderDecodersAllocate: a phase message's Saga-Deferred header costs
// its entries' slice and nothing else, a Saga-Claim header its claim.
func TestHeaderDecodersAllocate(t *testing.T) {
	d := testing.AllocsPerRun(100, func() {
		if _, err := DecodeDeferred("1:1700000000000000001,2:1700000000000000002,4:1700000000000000003"); err != nil {
			t.Fatal(err)
		}
	})
	require.Equal(t, 1.0, d)
	c := testing.AllocsPerRun(100, func() {
		if _, err := DecodeClaimed("1700000000000000123:sagad-1/AbC123"); err != nil {
			t.Fatal(err)
		}
	})
	require.Equal(t, 1.0, c)
}
