package rules_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/rules"
)

// BenchmarkEvaluateRules measures AUTOMATED_GATES' evaluation of the 21
// absolute rules on a valid capsule, offline (nil Facts: the three rules with
// a live part skip it).
func BenchmarkEvaluateRules(b *testing.B) {
	raw := capsuletest.New().Sealed(b)
	c := new(capsule.Capsule)
	if err := json.Unmarshal(raw, c); err != nil {
		b.Fatal(err)
	}
	cfg := rules.Config{}.WithDefaults()
	now := time.Now()
	ctx := context.Background()
	if res := rules.Evaluate(ctx, rules.Input{Capsule: c, Raw: raw, Config: cfg, Now: now}); len(res.Violated) > 0 {
		b.Fatalf("valid capsule violates rules %v: %v", res.Violated, res.Findings)
	}
	b.ReportAllocs()
	for b.Loop() {
		rules.Evaluate(ctx, rules.Input{Capsule: c, Raw: raw, Config: cfg, Now: now})
	}
}

// BenchmarkSecrets measures Rule 9 alone on the benchmark's capsule: the
// walk of its strings and the filter before the patterns.
func BenchmarkSecrets(b *testing.B) {
	raw := capsuletest.New().Sealed(b)
	c := new(capsule.Capsule)
	if err := json.Unmarshal(raw, c); err != nil {
		b.Fatal(err)
	}
	r, _ := rules.Lookup(9)
	in := rules.Input{Capsule: c, Raw: raw, Config: rules.Config{}.WithDefaults()}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if fs, _ := r.Run(ctx, in); len(fs) > 0 {
			b.Fatal(fs)
		}
	}
}
