package phases

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// randomIDs are capsule ids and keys of every shape: empty, UUIDs, text
// with verbs and non-ASCII, invalid UTF-8.
func randomIDs(rng *rand.Rand, n int) []string {
	ids := []string{"", "3f1c9a2e-8b4d-4c6e-9a1f-2b3c4d5e6f70", "x-42", "%d%s%v", "ünïcødé/🙂", "\xff\xfe", "a/b/c"}
	const alphabet = "abcdef0123456789-/%xé\x00 "
	for range n {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		ids = append(ids, string(b))
	}
	return ids
}

func randomInts(rng *rand.Rand, n int) []int {
	ints := []int{0, 1, 2, -1, 9, 10, 99, 100, math.MaxInt, math.MinInt}
	for range n {
		ints = append(ints, rng.IntN(2000)-1000, int(rng.Int64()))
	}
	return ints
}

// TestIDsAsSprintf holds the ids made by concatenation to the fmt.Sprintf
// they replace: the idempotency keys and charge ids leave the process (in
// executor requests and budget records) and must not change.
func TestIDsAsSprintf(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(24, 6))
	ids, ints := randomIDs(rng, 300), randomInts(rng, 20)
	for _, id := range ids {
		for _, cycle := range ints {
			if got, want := IdempotencyKey(id, cycle), fmt.Sprintf("%s/%d", id, cycle); got != want {
				t.Fatalf("IdempotencyKey(%q, %d) = %q, want %q", id, cycle, got, want)
			}
			for _, n := range ints[:12] {
				want := fmt.Sprintf("%s/a%d", fmt.Sprintf("%s/%d", id, cycle), n)
				exec, review := fmt.Sprintf("%s/%d/exec/a%d", id, cycle, n), fmt.Sprintf("%s/%d/review/a%d", id, cycle, n)
				if n <= 1 {
					want = fmt.Sprintf("%s/%d", id, cycle)
					exec, review = fmt.Sprintf("%s/%d/exec", id, cycle), fmt.Sprintf("%s/%d/review", id, cycle)
				}
				if got := AttemptKey(id, cycle, n); got != want {
					t.Fatalf("AttemptKey(%q, %d, %d) = %q, want %q", id, cycle, n, got, want)
				}
				if got := execChargeID(id, cycle, n); got != exec {
					t.Fatalf("execChargeID(%q, %d, %d) = %q, want %q", id, cycle, n, got, exec)
				}
				if got := reviewChargeID(id, cycle, n); got != review {
					t.Fatalf("reviewChargeID(%q, %d, %d) = %q, want %q", id, cycle, n, got, review)
				}
			}
		}
	}
}

// TestSHA256HexAsEncodeToString holds sha256Hex to hex.EncodeToString of
// the sum, over contents of every length up to a few blocks.
func TestSHA256HexAsEncodeToString(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(24, 7))
	for n := range 300 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		sum := sha256.Sum256(b)
		if got, want := sha256Hex(b), hex.EncodeToString(sum[:]); got != want {
			t.Fatalf("sha256Hex of %d bytes = %q, want %q", n, got, want)
		}
	}
}

// BenchmarkIDs makes one attempt's ids: its idempotency key, charge id and
// artifact digest.
func BenchmarkIDs(b *testing.B) {
	const id = "3f1c9a2e-8b4d-4c6e-9a1f-2b3c4d5e6f70"
	content := make([]byte, 512)
	b.ReportAllocs()
	for range b.N {
		_ = AttemptKey(id, 1, 1)
		_ = execChargeID(id, 1, 1)
		_ = reviewChargeID(id, 1, 1)
		_ = sha256Hex(content)
	}
}
