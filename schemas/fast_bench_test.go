package schemas

import (
	"os"
	"testing"
)

// BenchmarkCapsuleDoc compares RECEPTION's validation of a decoded, valid
// capsule (ValidateDoc) through the library alone and through the fast path.
func BenchmarkCapsuleDoc(b *testing.B) {
	raw, err := os.ReadFile("../examples/capsules/valid.json")
	if err != nil {
		b.Fatal(err)
	}
	doc, err := decode(raw)
	if err != nil {
		b.Fatal(err)
	}
	_, schema, err := lookupSchema(Capsule)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("library", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := schema.Validate(doc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := ValidateDoc(Capsule, doc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
