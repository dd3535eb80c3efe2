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
