package executors

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
)

func requireStubContentAsMarshal(t *testing.T, title, target, key string, cycle int) {
	t.Helper()
	want, wantErr := json.Marshal(map[string]any{
		"summary":         "stub artifact for " + title,
		"cycle":           cycle,
		"target":          target,
		"idempotency_key": key,
	})
	got, err := stubContent(title, target, key, cycle)
	if err != nil || wantErr != nil {
		t.Fatalf("error %v, json.Marshal's %v", err, wantErr)
	}
	if string(got) != string(want) {
		t.Fatalf("%q %q %q %d:\n got %s\nwant %s", title, target, key, cycle, got, want)
	}
}

// TestStubContentAsMarshal holds the stub's artifact to json.Marshal of
// the map it was made from: strings of every shape (JSON escapes, HTML
// characters, non-ASCII, invalid UTF-8), cycles to their limits.
func TestStubContentAsMarshal(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(24, 12))
	const alphabet = "abcXYZ019-_/.=: \"\\<>&\n\x7f\x00é\xff\u2028"
	str := func() string {
		if rng.IntN(2) == 0 {
			return "kv:BENCH_TARGETS/t 0190a1b2-c3d4/1"[:rng.IntN(35)]
		}
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	for _, c := range []int{0, 1, -1, math.MaxInt, math.MinInt} {
		requireStubContentAsMarshal(t, "Benchmark capsule", "kv:BENCH_TARGETS/t", "x/1", c)
	}
	for range 20000 {
		requireStubContentAsMarshal(t, str(), str(), str(), int(rng.Int64())>>rng.IntN(64))
	}
}

// FuzzStubContent: the stub's artifact is json.Marshal's of its map.
func FuzzStubContent(f *testing.F) {
	f.Add("Benchmark capsule", "kv:BENCH_TARGETS/t", "0190a1b2-c3d4/1", 1)
	f.Add("a<b>&\"c\"\\\u2028", "\xff", "é\n", -7)
	f.Fuzz(func(t *testing.T, title, target, key string, cycle int) {
		requireStubContentAsMarshal(t, title, target, key, cycle)
	})
}

// BenchmarkStubContent makes the stub's artifact, directly and through
// json.Marshal of a map.
func BenchmarkStubContent(b *testing.B) {
	const title, target, key = "Benchmark capsule", "kv:BENCH_TARGETS/t", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/1"
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = stubContent(title, target, key, 1)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = json.Marshal(map[string]any{"summary": "stub artifact for " + title, "cycle": 1, "target": target, "idempotency_key": key})
		}
	})
}
