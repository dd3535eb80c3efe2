package capsule

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/differential"
)

// traceIDResult is what traceIDOf returns, as one value to compare.
type traceIDResult struct {
	ID string
	OK bool
}

// traceIDOfByteLoop is traceIDOf as it was before lowerHex8: every digit
// tested on its own. traceIDOfPair holds the word-at-a-time test to it.
func traceIDOfByteLoop(tp string) (string, bool) {
	if len(tp) != 55 || tp[:3] != "00-" || tp[35] != '-' || tp[52] != '-' {
		return "", false
	}
	for i := 3; i < len(tp); i++ {
		if c := tp[i]; i != 35 && i != 52 && !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", false
		}
	}
	return tp[3:35], true
}

const validTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// traceIDOfPair: the trace id is found in exactly the traceparents the
// byte loop finds it in. The generator changes a valid traceparent at one
// place, with bytes next to the bounds of the digit ranges ('/', ':', '`',
// 'g', upper case) and past ASCII, or cuts or grows it.
var traceIDOfPair = differential.Pair[string, traceIDResult]{
	Name: "TraceIDOf",
	Fast: func(tp string) (traceIDResult, error) {
		id, ok := traceIDOf(tp)
		return traceIDResult{id, ok}, nil
	},
	Reference: func(tp string) (traceIDResult, error) {
		id, ok := traceIDOfByteLoop(tp)
		return traceIDResult{id, ok}, nil
	},
	Seeds: []string{"", validTraceparent, "01" + validTraceparent[2:], validTraceparent + "-",
		"00-00000000000000000000000000000000-0000000000000000-00", "00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-ff",
		"00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01", validTraceparent[:54] + "g", validTraceparent[:53] + "/1",
		validTraceparent[:3] + "\xff" + validTraceparent[4:], validTraceparent[:35] + "0" + validTraceparent[36:]},
	Generate: func(r *rand.Rand) string {
		const near = "0123456789abcdef/:`gAF-\x00\x7f\x80\xb0\xe0\xff"
		b := []byte(validTraceparent)
		for i := range b {
			if b[i] != '-' && i > 2 {
				b[i] = "0123456789abcdef"[r.IntN(16)]
			}
		}
		switch r.IntN(6) {
		case 0:
		case 1:
			b = b[:r.IntN(len(b))]
		case 2:
			b = append(b, near[r.IntN(len(near))])
		default:
			for n := 1 + r.IntN(2); n > 0; n-- {
				b[r.IntN(len(b))] = near[r.IntN(len(near))]
			}
		}
		return string(b)
	},
	Count:  20000,
	Decode: func(b []byte) (string, bool) { return string(b), true },
	Encode: func(s string) []byte { return []byte(s) },
}

func FuzzTraceIDOf(f *testing.F) { differential.Fuzz(f, traceIDOfPair) }

// TestTraceIDOfEveryByte: every byte value at every place of a valid
// traceparent is judged as the byte loop judges it, so every lane of
// lowerHex8's words and both bounds of both ranges are met.
func TestTraceIDOfEveryByte(t *testing.T) {
	t.Parallel()
	b := []byte(validTraceparent)
	for i := range b {
		orig := b[i]
		for c := range 256 {
			b[i] = byte(c)
			tp := string(b)
			id, ok := traceIDOf(tp)
			wantID, wantOK := traceIDOfByteLoop(tp)
			require.Equal(t, wantOK, ok, "%q", tp)
			require.Equal(t, wantID, id, "%q", tp)
		}
		b[i] = orig
	}
}
