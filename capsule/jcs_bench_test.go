package capsule_test

import (
	"testing"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
)

// typical is a sealed capsule as producers send it: the test builder's valid
// capsule with a two-cycle review script in its metadata.
func typical(b *testing.B) []byte {
	b.Helper()
	return capsuletest.New().Stub(map[string]any{"reviews": []any{"CHANGES_REQUESTED", "APPROVED"}}).Sealed(b)
}

// BenchmarkDigest measures the integrity digest RECEPTION computes twice
// per capsule (Digest, then VerifyIntegrity).
func BenchmarkDigest(b *testing.B) {
	raw := typical(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := capsule.Digest(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyIntegrity measures RECEPTION's integrity check.
func BenchmarkVerifyIntegrity(b *testing.B) {
	raw := typical(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if err := capsule.VerifyIntegrity(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSeal measures what a producer pays to seal a capsule.
func BenchmarkSeal(b *testing.B) {
	raw := capsuletest.New().Unsealed(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := capsule.Seal(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDigestObject measures the digest alone, on the tree RECEPTION's
// parse made.
func BenchmarkDigestObject(b *testing.B) {
	doc, err := capsule.ParseJSON(typical(b))
	if err != nil {
		b.Fatal(err)
	}
	obj := doc.(map[string]any)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := capsule.DigestObject(obj); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDocumentDigest measures RECEPTION's digest on a sealed capsule:
// hashed as written when the text is canonical but for whitespace.
func BenchmarkDocumentDigest(b *testing.B) {
	doc, err := capsule.ParseDocument(typical(b))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := doc.Digest(); err != nil {
			b.Fatal(err)
		}
	}
}
