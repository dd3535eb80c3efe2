package seqid

import (
	"sync"
	"testing"

	"github.com/nats-io/nuid"
)

// isNUIDShaped: what a nuid is, 22 characters of nuid's alphabet.
func isNUIDShaped(s string) bool {
	if len(s) != Len {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z') {
			return false
		}
	}
	return true
}

// TestShapedAsNUID: an id has nuid's shape, so whatever reads ids (object
// store chunk subjects, claims' holders) sees what nuid made before.
func TestShapedAsNUID(t *testing.T) {
	t.Parallel()
	if !isNUIDShaped(nuid.Next()) {
		t.Fatal("the shape test does not accept a nuid")
	}
	g := New()
	for range 10000 {
		if id := g.Next(); !isNUIDShaped(id) {
			t.Fatalf("%q is not shaped as a nuid", id)
		}
	}
}

// TestUnique: ids from concurrent callers of one generator, and from
// several generators, never repeat; the sequence runs in base 62 with
// carries.
func TestUnique(t *testing.T) {
	t.Parallel()
	gens := []*Gen{New(), New(), New()}
	if gens[0].pre == gens[1].pre {
		t.Fatalf("two generators share the prefix %q", gens[0].pre[:])
	}
	var mu sync.Mutex
	seen := make(map[string]bool)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]string, 0, 5000)
			for range 5000 {
				ids = append(ids, gens[w%len(gens)].Next())
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range ids {
				if seen[id] {
					t.Errorf("%q made twice", id)
				}
				seen[id] = true
			}
		}()
	}
	wg.Wait()

	var g Gen
	copy(g.pre[:], "ABCDEFGHIJKL")
	g.seq.Store(61)
	if got := g.Next(); got != "ABCDEFGHIJKL0000000010" {
		t.Fatalf("after 61: %q", got)
	}
	g.seq.Store(maxSeq - 2)
	if got := g.Next(); got != "ABCDEFGHIJKLzzzzzzzzzz" {
		t.Fatalf("the last sequence: %q", got)
	}
	if got := g.Next(); !isNUIDShaped(got) || got[:preLen] == "ABCDEFGHIJKL" {
		t.Fatalf("past the last sequence: %q, want a nuid", got)
	}
}

// TestAppendNext: the id is appended to what dst holds.
func TestAppendNext(t *testing.T) {
	t.Parallel()
	b := New().AppendNext([]byte("host-1-abc/"))
	if string(b[:11]) != "host-1-abc/" || !isNUIDShaped(string(b[11:])) {
		t.Fatalf("%q", b)
	}
}

// BenchmarkNext against nuid.Next, both from every worker at once (as the
// phase workers make run tokens).
func BenchmarkNext(b *testing.B) {
	b.Run("nuid", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = nuid.Next()
			}
		})
	})
	b.Run("seqid", func(b *testing.B) {
		g := New()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = g.Next()
			}
		})
	})
}
