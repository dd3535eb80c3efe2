package executors

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"testing"

	"github.com/sagad/sagad/internal/differential"
)

// hexPair and tokenHashPair hold the tokens' and hashes' hex to
// hex.EncodeToString: a token's hash is what a checkpoint keeps and a
// completion is checked against.
var (
	hexPair = differential.Pair[[]byte, string]{
		Name:      "TokenHex",
		Fast:      func(b []byte) (string, error) { return hexString(b), nil },
		Reference: func(b []byte) (string, error) { return hex.EncodeToString(b), nil },
		Seeds: func() (out [][]byte) {
			rng := rand.New(rand.NewPCG(24, 6))
			for n := 0; n <= CompletionTokenBytes; n++ {
				b := make([]byte, n)
				for i := range b {
					b[i] = byte(rng.UintN(256))
				}
				out = append(out, b)
			}
			return out
		}(),
		Decode: func(b []byte) ([]byte, bool) { return b, true },
		Encode: func(b []byte) []byte { return b },
	}
	tokenHashPair = differential.Pair[string, string]{
		Name: "CompletionTokenHash",
		Fast: func(tok string) (string, error) { return CompletionTokenHash(tok), nil },
		Reference: func(tok string) (string, error) {
			sum := sha256.Sum256([]byte(tok))
			return hex.EncodeToString(sum[:]), nil
		},
		Seeds: []string{"", "0190a1b2", "\xff"},
		Generate: func(rng *rand.Rand) string {
			tok := make([]byte, rng.IntN(100))
			for i := range tok {
				tok[i] = byte(rng.UintN(256))
			}
			return string(tok)
		},
		Count:  2000,
		Decode: func(b []byte) (string, bool) { return string(b), true },
		Encode: func(s string) []byte { return []byte(s) },
	}
)

// TestNewCompletionTokenIsHex: a new token is the lower-case hex of
// CompletionTokenBytes bytes.
func TestNewCompletionTokenIsHex(t *testing.T) {
	t.Parallel()
	for range 100 {
		tok, err := NewCompletionToken()
		if err != nil {
			t.Fatal(err)
		}
		b, err := hex.DecodeString(tok)
		if err != nil || len(b) != CompletionTokenBytes || hex.EncodeToString(b) != tok {
			t.Fatalf("token %q is not the lower-case hex of %d bytes", tok, CompletionTokenBytes)
		}
	}
}

// BenchmarkClaimToken makes what a claim makes: a call token and its hash.
func BenchmarkClaimToken(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		tok, _ := NewCompletionToken()
		_ = CompletionTokenHash(tok)
	}
}
