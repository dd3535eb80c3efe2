package phases_test

import (
	"context"
	"testing"

	"github.com/sagad/sagad/phases"
)

// BenchmarkExecutionRun runs EXECUTION with the stub executor: claim, one
// call, the artifact stored, the usage charged.
func BenchmarkExecutionRun(b *testing.B) {
	bd := setup(b)
	in := execInput(b, newDoc().Sealed(b), 1)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d := (phases.Execution{}).Run(ctx, bd.env, in); d.Err != nil {
			b.Fatal(d.Err)
		}
	}
}

// BenchmarkReviewRun runs REVIEW with the stub reviewer: claim, one call,
// the verdict charged and decided.
func BenchmarkReviewRun(b *testing.B) {
	bd := setup(b)
	in := reviewInput(b, bd, newDoc().Sealed(b), 1, "agent-coder-1")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d := (phases.Review{}).Run(ctx, bd.env, in); d.Err != nil {
			b.Fatal(d.Err)
		}
	}
}
