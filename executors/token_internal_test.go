package executors

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"testing"
)

// TestTokenHexAsEncodeToString holds the tokens' and hashes' hex to
// hex.EncodeToString: a token's hash is what a checkpoint keeps and a
// completion is checked against.
func TestTokenHexAsEncodeToString(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(24, 6))
	for n := 0; n <= CompletionTokenBytes; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		if got, want := hexString(b), hex.EncodeToString(b); got != want {
			t.Fatalf("hexString(%x) = %q, want %q", b, got, want)
		}
	}
	for range 2000 {
		tok := make([]byte, rng.IntN(100))
		for i := range tok {
			tok[i] = byte(rng.UintN(256))
		}
		sum := sha256.Sum256(tok)
		if got, want := CompletionTokenHash(string(tok)), hex.EncodeToString(sum[:]); got != want {
			t.Fatalf("CompletionTokenHash(%q) = %q, want %q", tok, got, want)
		}
	}
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
