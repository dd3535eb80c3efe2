package cli

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

// TestReportNamesTheDefaultReviewer: a capsule that declared no reviewer
// was reviewed by sagad's default_reviewer; the report's summary names it
// from the checkpoint's reviews.
func TestReportNamesTheDefaultReviewer(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		declared string
		reviews  []capsule.ReviewEntry
		want     string
	}{
		{"declared", "agent-review-2", []capsule.ReviewEntry{{Cycle: 1, ReviewerID: "agent-review-2"}}, "| Reviewer | `agent-review-2` |"},
		{"default", "", []capsule.ReviewEntry{{Cycle: 1, ReviewerID: "stub-reviewer"}}, "| Reviewer | `stub-reviewer` (sagad's default reviewer) |"},
		{"not yet reviewed", "", nil, "| Reviewer | none declared |"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cp := &capsule.Checkpoint{CapsuleID: "c1", Key: "c1"}
			cp.State.Reviews = tt.reviews
			c := &capsule.Capsule{CapsuleID: "c1"}
			c.Review.ReviewerAgentID = tt.declared
			var out bytes.Buffer
			require.NoError(t, writeReport(&out, &ReportData{Checkpoint: cp, Capsule: c}))
			require.Contains(t, out.String(), tt.want)
		})
	}
}

// TestReportRunAndAttempts: a replayed capsule's report names its run and
// counts this run's cycles; the failure policy's recorded attempts show.
func TestReportRunAndAttempts(t *testing.T) {
	t.Parallel()
	cp := &capsule.Checkpoint{CapsuleID: "c1", Key: "c1", Run: 2, CycleBase: 1}
	cp.State.Cycle = 2
	cp.State.Attempts = &capsule.ExecutionAttempts{Cycle: 2, Phase: capsule.ReviewPhase, Failed: 1, LastFailure: capsule.AttemptFailure{Error: "reviewer down"}}
	c := &capsule.Capsule{CapsuleID: "c1"}
	var out bytes.Buffer
	require.NoError(t, writeReport(&out, &ReportData{Checkpoint: cp, Capsule: c}))
	require.Contains(t, out.String(), "| Run | 2 (replayed; its cycles count on from cycle 2) |")
	require.Contains(t, out.String(), "| Cycles used | 1 of 3 in this run (cycle 2 overall) |")
	require.Contains(t, out.String(), "| Failed attempts | 1 of REVIEW cycle 2 (failure policy); last: reviewer down |")

	out.Reset()
	cp = &capsule.Checkpoint{CapsuleID: "c1", Key: "c1"}
	cp.State.Cycle = 1
	require.NoError(t, writeReport(&out, &ReportData{Checkpoint: cp, Capsule: c}))
	require.NotContains(t, out.String(), "| Run |")
	require.NotContains(t, out.String(), "| Failed attempts |")
}
