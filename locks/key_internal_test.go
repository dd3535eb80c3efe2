package locks

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
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

// TestEncodeLeaseAsMarshal holds encodeLease to json.Marshal: paths,
// holders and owners of every shape, times in any zone and year.
func TestEncodeLeaseAsMarshal(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(24, 7))
	const alphabet = "abz09/._-\"\\<>&é\x00\x7f\xff "
	str := func() string {
		b := make([]byte, 1+rng.IntN(30))
		for i := range b {
			if rng.IntN(8) == 0 {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			} else {
				b[i] = alphabet[rng.IntN(7)]
			}
		}
		return string(b)
	}
	when := func() time.Time {
		at := time.Unix(rng.Int64N(1<<36)-1<<35, rng.Int64N(1e9))
		switch rng.IntN(4) {
		case 0:
			return at.UTC()
		case 1:
			return at.In(time.FixedZone("", rng.IntN(50*3600)-25*3600))
		case 2:
			return time.Now()
		}
		return at.Local()
	}
	for range 20000 {
		l := &lease{Path: str(), Holder: str(), Owner: str(), AcquiredAt: when(), ExpiresAt: when()}
		want, wantErr := json.Marshal(l)
		got, err := encodeLease(l)
		if (err != nil) != (wantErr != nil) || string(got) != string(want) {
			t.Fatalf("%+v:\n got %s (%v)\nwant %s (%v)", l, got, err, want, wantErr)
		}
	}
}

func BenchmarkEncodeLease(b *testing.B) {
	now := time.Now()
	l := &lease{Path: "workspace/src/internal/handler.go", Holder: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", Owner: "host-1/12345",
		AcquiredAt: now, ExpiresAt: now.Add(30 * time.Second)}
	b.Run("encodeLease", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = encodeLease(l)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = json.Marshal(l)
		}
	})
}

// TestSortedUniqueAsGeneral: the one-path shortcut gives what sorting and
// compacting give, and no call changes its argument.
func TestSortedUniqueAsGeneral(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(24, 8))
	for range 5000 {
		paths := make([]string, rng.IntN(5))
		for i := range paths {
			paths[i] = []string{"a", "b", "src/x.go", ""}[rng.IntN(4)]
		}
		before := slices.Clone(paths)
		want := slices.Compact(slices.Sorted(slices.Values(paths)))
		if got := sortedUnique(paths); !slices.Equal(got, want) {
			t.Fatalf("sortedUnique(%q) = %q, want %q", paths, got, want)
		}
		if !slices.Equal(paths, before) {
			t.Fatalf("sortedUnique changed its argument: %q, was %q", paths, before)
		}
	}
}
