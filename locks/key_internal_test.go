package locks

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"testing"
)

// TestKeyAsEncodeToString holds Key to the hex.EncodeToString of the
// path's sum it was written as: every sagad, of any version, must name a
// path's lock with the same key.
func TestKeyAsEncodeToString(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(24, 6))
	paths := []string{"", "/", "src/main.go", "ünïcødé/🙂", "\xff"}
	for range 2000 {
		b := make([]byte, rng.IntN(200))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		paths = append(paths, string(b))
	}
	for _, p := range paths {
		sum := sha256.Sum256([]byte(p))
		if got, want := Key(p), hex.EncodeToString(sum[:]); got != want {
			t.Fatalf("Key(%q) = %q, want %q", p, got, want)
		}
	}
}

func BenchmarkKey(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		_ = Key("workspace/src/internal/handler.go")
	}
}
