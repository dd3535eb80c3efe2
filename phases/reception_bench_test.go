package phases_test

import (
	"context"
	"testing"
	"time"

	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/phases"
	"github.com/sagad/sagad/rules"
)

// BenchmarkReceive measures RECEPTION's work on a capsule's bytes (read,
// digest, schema, decode, checks; the lock lookup answers at once) on a
// sealed capsule like the benchmark's, with a review script in metadata.
func BenchmarkReceive(b *testing.B) {
	raw := capsuletest.New().
		Set("created_at", now.Add(-time.Minute).Format(time.RFC3339)).
		Set("deadline", now.Add(time.Hour).Format(time.RFC3339)).
		Stub(map[string]any{"reviews": []any{"CHANGES_REQUESTED", "APPROVED"}}).
		Sealed(b)
	env := &phases.Env{
		Locks: receptionLocks{}, Rules: rules.Config{}.WithDefaults(),
		Now: func() time.Time { return now }, RetryDelay: time.Second,
	}
	holder := func(id string) string { return id }
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if r := phases.Receive(context.Background(), env, raw, holder); r.Decision.Action != phases.Advance {
			b.Fatalf("%v %v", r.Decision.Halt, r.Decision.Findings)
		}
	}
}
