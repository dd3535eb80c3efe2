package locks

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sagad/sagad/internal/differential"
)

// keyPair holds Key to the hex.EncodeToString of the path's sum it was
// written as: every sagad, of any version, must name a path's lock with
// the same key.
var keyPair = differential.Pair[string, string]{
	Name: "LockKey",
	Fast: func(p string) (string, error) { return Key(p), nil },
	Reference: func(p string) (string, error) {
		sum := sha256.Sum256([]byte(p))
		return hex.EncodeToString(sum[:]), nil
	},
	// Paths up to, at and past Key's 256-byte stack buffer.
	Seeds: []string{"", "/", "src/main.go", "ünïcødé/🙂", "\xff",
		strings.Repeat("a", 255), strings.Repeat("b", 256), strings.Repeat("\xfe", 257), strings.Repeat("ü/", 1000)},
	Generate: func(rng *rand.Rand) string {
		b := make([]byte, rng.IntN(600))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return string(b)
	},
	Count:  2000,
	Decode: func(b []byte) (string, bool) { return string(b), true },
	Encode: func(s string) []byte { return []byte(s) },
}

// leasePair holds encodeLease to json.Marshal: paths, holders and owners
// of every shape, times in any zone and year.
var leasePair = differential.Pair[*lease, string]{
	Name:      "EncodeLease",
	Fast:      func(l *lease) (string, error) { b, err := encodeLease(l); return string(b), err },
	Reference: func(l *lease) (string, error) { b, err := json.Marshal(l); return string(b), err },
	Seeds: []*lease{{Path: "workspace/src/internal/handler.go", Holder: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", Owner: "host-1/12345",
		AcquiredAt: time.Date(2026, 11, 28, 1, 2, 3, 4, time.UTC), ExpiresAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}},
	Generate: randomLease,
	Count:    20000,
	// Each time as seconds (8 bytes), nanoseconds (4) and a zone in
	// minutes (2), then the path, the holder and the owner apart by zero
	// bytes.
	Decode: func(b []byte) (*lease, bool) {
		if len(b) < 28 {
			return nil, false
		}
		at := func(b []byte) time.Time {
			return time.Unix(int64(binary.LittleEndian.Uint64(b)), int64(binary.LittleEndian.Uint32(b[8:])%1e9)).
				In(time.FixedZone("", int(int16(binary.LittleEndian.Uint16(b[12:])))*60))
		}
		parts := strings.SplitN(string(b[28:]), "\x00", 3)
		for len(parts) < 3 {
			parts = append(parts, "")
		}
		return &lease{Path: parts[0], Holder: parts[1], Owner: parts[2], AcquiredAt: at(b), ExpiresAt: at(b[14:])}, true
	},
	Encode: func(l *lease) []byte {
		var b []byte
		for _, at := range []time.Time{l.AcquiredAt, l.ExpiresAt} {
			_, off := at.Zone()
			b = binary.LittleEndian.AppendUint64(b, uint64(at.Unix()))
			b = binary.LittleEndian.AppendUint32(b, uint32(at.Nanosecond()))
			b = binary.LittleEndian.AppendUint16(b, uint16(int16(off/60)))
		}
		return append(b, l.Path+"\x00"+l.Holder+"\x00"+l.Owner...)
	},
}

func randomLease(rng *rand.Rand) *lease {
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
	return &lease{Path: str(), Holder: str(), Owner: str(), AcquiredAt: when(), ExpiresAt: when()}
}

// This package's fast paths, held to what they replace by the shared
// harness.
func TestDifferential(t *testing.T) {
	t.Parallel()
	differential.RunAll(t, differential.Registry{keyPair, leasePair})
}

func FuzzLockKey(f *testing.F)     { differential.Fuzz(f, keyPair) }
func FuzzEncodeLease(f *testing.F) { differential.Fuzz(f, leasePair) }

func BenchmarkKey(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		_ = Key("workspace/src/internal/handler.go")
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
