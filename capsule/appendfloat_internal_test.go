package capsule

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sagad/sagad/internal/differential"
)

// appendFloatPair: a float (a usage's dollars, a budget's) is written as
// encoding/json writes a float64, through appendMicros where it takes it
// (decimals of up to six places) and strconv's shortest form elsewhere.
// The generator draws decimals of up to eight places, sums of such (which
// are mostly not the double nearest a short decimal), values next to the
// bounds of appendMicros and of encoding/json's exponent form, and any
// bits at all.
var appendFloatPair = differential.Pair[float64, string]{
	Name:      "AppendFloat",
	Fast:      func(f float64) (string, error) { b, err := appendFloat(nil, f); return string(b), err },
	Reference: func(f float64) (string, error) { b, err := json.Marshal(f); return string(b), err },
	Seeds: []float64{0, math.Copysign(0, -1), 0.01, 0.012, 5, 1e-6, 9.99e-7, 1e9 - 1e-6, 1e9, 0.30000000000000004, 123456.789012,
		999999999.999999, 0.000001, 1.5e-6, 1e21, 1e-7, -0.01, -5, math.MaxFloat64, math.SmallestNonzeroFloat64,
		math.NaN(), math.Inf(1), math.Inf(-1), math.Nextafter(0.01, 1), math.Nextafter(0.01, 0), math.Nextafter(1e-6, 0)},
	Generate: func(r *rand.Rand) float64 {
		switch r.IntN(5) {
		case 0:
			return float64(r.Int64N(1e15)) / math.Pow10(r.IntN(9))
		case 1:
			sum := 0.0
			for n := r.IntN(6); n >= 0; n-- {
				sum += float64(r.IntN(100000)) / math.Pow10(r.IntN(7))
			}
			return sum
		case 2:
			edges := []float64{1e-6, 1e9, 1e21, 1, 0.1, 0.5}
			f := edges[r.IntN(len(edges))]
			for n := r.IntN(4); n > 0; n-- {
				f = math.Nextafter(f, math.Inf(2*r.IntN(2)-1))
			}
			return f
		case 3:
			return -float64(r.Int64N(1e12)) / math.Pow10(r.IntN(7))
		}
		return math.Float64frombits(r.Uint64())
	},
	Count: 40000,
	Decode: func(b []byte) (float64, bool) {
		if len(b) < 8 {
			return 0, false
		}
		return math.Float64frombits(binary.LittleEndian.Uint64(b)), true
	},
	Encode: func(f float64) []byte { return binary.LittleEndian.AppendUint64(nil, math.Float64bits(f)) },
}

func FuzzAppendFloat(f *testing.F) { differential.Fuzz(f, appendFloatPair) }

// TestAppendMicrosTaken: the fast path takes a usage's usual dollars, so
// the pair above meets it and not only strconv.
func TestAppendMicrosTaken(t *testing.T) {
	t.Parallel()
	for _, f := range []float64{0.01, 0.012, 5, 1e-6, 123456.789012} {
		if _, ok := appendMicros(nil, f); !ok {
			t.Errorf("appendMicros declines %v", f)
		}
	}
	tenth := 0.1 // a variable: 0.1 + 0.2 of constants is 0.3 exactly
	for _, f := range []float64{0, tenth + 0.2, 1e9, 9.99e-7, math.NaN()} {
		if _, ok := appendMicros(nil, f); ok {
			t.Errorf("appendMicros takes %v", f)
		}
	}
}
