package pipeline

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
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
