package schemas_test

import (
	"testing"

	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/schemas"
)

// BenchmarkValidateCapsule measures RECEPTION's schema validation of a
// valid, sealed capsule (the compiled schema is cached after the first call).
func BenchmarkValidateCapsule(b *testing.B) {
	raw := capsuletest.New().Sealed(b)
	if err := schemas.Validate(schemas.Capsule, raw); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if err := schemas.Validate(schemas.Capsule, raw); err != nil {
			b.Fatal(err)
		}
	}
}
