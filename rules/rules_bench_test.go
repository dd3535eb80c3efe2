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
