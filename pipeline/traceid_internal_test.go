package pipeline

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/differential"
	"github.com/sagad/sagad/internal/tracing"
)

// TestTraceIDOfIsTheParsedID: the exemplar's trace id, taken from the
// traceparent's text, is the id the parser reads, for valid traceparents
// and for ones a digit, a dash or a length away from valid.
func TestTraceIDOfIsTheParsedID(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(24, 6))
	const alphabet = "0123456789abcdefABF-xz"
	valid := func() []byte {
		b := []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		for i := range b {
			if b[i] != '-' {
				b[i] = "0123456789abcdef"[rng.IntN(16)]
			}
		}
		return b
	}
	cases := []string{"", "00-00000000000000000000000000000000-b7ad6b7169203331-01", "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-more", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-more"}
	for range 5000 {
		b := valid()
		switch rng.IntN(4) {
		case 1:
			b[rng.IntN(len(b))] = alphabet[rng.IntN(len(alphabet))]
		case 2:
			b = b[:rng.IntN(len(b))]
		case 3:
			b = append(b, alphabet[rng.IntN(len(alphabet))])
		}
		cases = append(cases, string(b))
	}
	for _, tp := range cases {
		want := ""
		if sc, err := tracing.ParseTraceparent(tp); err == nil {
			want = sc.TraceID().String()
		}
		require.Equal(t, want, traceIDOf(&capsule.Checkpoint{TraceParent: tp}), tp)
	}
}

// traceIDOfPair: the exemplar's trace id, tested first in capsule's
// canonical version-00 form, is what the test by tracing.ValidTraceparent
// alone gave, for traceparents a digit, a dash, a version, a zero id or a
// length away from valid.
var traceIDOfPair = differential.Pair[string, string]{
	Name: "TraceIDOf",
	Fast: func(tp string) (string, error) { return traceIDOf(&capsule.Checkpoint{TraceParent: tp}), nil },
	Reference: func(tp string) (string, error) {
		if tracing.ValidTraceparent(tp) {
			return tp[3:35], nil
		}
		return "", nil
	},
	Seeds: []string{"", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"00-00000000000000000000000000000000-b7ad6b7169203331-01", "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
		"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-more",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-more", "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01"},
	Generate: func(r *rand.Rand) string {
		const near = "0123456789abcdef/:`gAF-x\x00\x80\xff"
		b := []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		for i := range b {
			if b[i] != '-' && i > 2 {
				b[i] = "0123456789abcdef"[r.IntN(16)]
			}
		}
		switch r.IntN(6) {
		case 0:
		case 1:
			// A zero trace or span id.
			from, to := 3, 35
			if r.IntN(2) == 0 {
				from, to = 36, 52
			}
			for i := from; i < to; i++ {
				b[i] = '0'
			}
		case 2:
			b = b[:r.IntN(len(b))]
		case 3:
			b = append(b, "-"+string(near[r.IntN(len(near))])...)
		default:
			b[r.IntN(len(b))] = near[r.IntN(len(near))]
		}
		return string(b)
	},
	Count:  20000,
	Decode: func(b []byte) (string, bool) { return string(b), true },
	Encode: func(s string) []byte { return []byte(s) },
}
