package bench

import (
	"testing"
	"time"
)

// BenchmarkGeneratorSealed is the driver's cost per capsule: what it takes
// from the CPU the measured systems share with it.
func BenchmarkGeneratorSealed(b *testing.B) {
	g := NewGenerator(MixMixed)
	now := time.Now()
	b.ReportAllocs()
	var seq uint64
	for b.Loop() {
		g.Sealed(seq, now)
		seq++
	}
}

// BenchmarkSealCapsule is the general way, capsule.Seal, for comparison.
func BenchmarkSealCapsule(b *testing.B) {
	g := NewGenerator(MixMixed)
	now := time.Now()
	b.ReportAllocs()
	var seq uint64
	for b.Loop() {
		if _, err := Seal(g.Capsule(seq, now)); err != nil {
			b.Fatal(err)
		}
		seq++
	}
}
