package pipeline_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/pipeline"
)

// countingReviewer counts reviews around the stub reviewer.
type countingReviewer struct{ n *atomic.Int64 }

func (c countingReviewer) Review(ctx context.Context, req executors.ReviewRequest) (executors.ReviewResult, error) {
	c.n.Add(1)
	return executors.StubReviewer{}.Review(ctx, req)
}

// TestDefaultReviewer: a capsule that declares no reviewer is reviewed by
// the configured default, which its checkpoint and status name; one whose
// producer is the default reviewer halts at AUTOMATED_GATES (Rule 20)
// before anything runs; a declared reviewer still wins over the default.
func TestDefaultReviewer(t *testing.T) {
	t.Parallel()
	reviewed := new(atomic.Int64)
	f := setupWith(t, func(c *pipeline.Config) {
		c.Executors.RegisterReviewer("reviewer-b", countingReviewer{n: reviewed})
		c.Rules.DefaultReviewer = "reviewer-b"
	})

	undeclared := f.own(t, capsuletest.New().Delete("review.reviewer_agent_id"))
	f.publish(t, undeclared.Sealed(t))
	s := f.wait(t, undeclared.ID())
	require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)
	require.Equal(t, "reviewer-b", s.Reviewer)
	require.Equal(t, int64(1), reviewed.Load())
	cp, err := f.client.Checkpoint(context.Background(), undeclared.ID())
	require.NoError(t, err)
	require.Len(t, cp.State.Reviews, 1)
	require.Equal(t, "reviewer-b", cp.State.Reviews[0].ReviewerID)

	declared := f.own(t, capsuletest.New())
	f.publish(t, declared.Sealed(t))
	s = f.wait(t, declared.ID())
	require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)
	require.Equal(t, executors.StubReviewerID, s.Reviewer)
	require.Equal(t, int64(1), reviewed.Load(), "the declared reviewer, not the default")

	executed := f.executed.Load()
	self := f.own(t, capsuletest.New().Delete("review.reviewer_agent_id").Set("producer_agent_id", "reviewer-b"))
	f.publish(t, self.Sealed(t))
	s = f.wait(t, self.ID())
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, "absolute_rules_violated:[20]", s.HaltReason)
	require.Equal(t, int(capsule.AutomatedGates), s.Phase)
	require.Equal(t, executed, f.executed.Load(), "no executor ran")
	require.Equal(t, int64(1), reviewed.Load())
}

// TestUnknownReviewerHaltsBeforeExecution: a reviewer id nobody serves
// halts at AUTOMATED_GATES (Rule 22) before the executor spends anything.
func TestUnknownReviewerHaltsBeforeExecution(t *testing.T) {
	t.Parallel()
	f := setup(t)
	doc := f.own(t, capsuletest.New().Set("review.reviewer_agent_id", "agent-nobody"))
	f.publish(t, doc.Sealed(t))
	s := f.wait(t, doc.ID())
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, "absolute_rules_violated:[22]", s.HaltReason)
	require.Equal(t, int(capsule.AutomatedGates), s.Phase)
	require.Equal(t, []string{"RECEPTION/passed", "REALITY_ANCHOR/passed", "PLANNING/passed", "AUTOMATED_GATES/halted"}, outcomes(s.History))
	require.Zero(t, f.executed.Load(), "no executor ran")
	require.Empty(t, s.Reviewer)
}
