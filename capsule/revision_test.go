package capsule

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRevisionFindings: after an operator's revise a revision addresses
// the reviewer's findings of that cycle, then the operator's, marked with
// their source; otherwise the latest review's, as they are.
func TestRevisionFindings(t *testing.T) {
	t.Parallel()
	reviewer := ReviewEntry{Cycle: 2, ReviewerID: "rev", Verdict: ChangesRequested, Findings: []Finding{{Message: "cite it"}}}
	older := ReviewEntry{Cycle: 1, ReviewerID: "rev", Findings: []Finding{{Message: "old"}}}
	operator := ReviewEntry{Cycle: 2, ReviewerID: OperatorReviewerPrefix + "carol", Findings: []Finding{{Message: "operator revision: MIT"}}}
	for name, tc := range map[string]struct {
		reviews []ReviewEntry
		want    []Finding
	}{
		"none":              {nil, nil},
		"reviewer's":        {[]ReviewEntry{older, reviewer}, []Finding{{Message: "cite it"}}},
		"revise over it":    {[]ReviewEntry{older, reviewer, operator}, []Finding{{Message: "cite it"}, {Message: "operator revision: MIT", Source: FindingSourceOperator}}},
		"revise alone":      {[]ReviewEntry{older, operator}, []Finding{{Message: "operator revision: MIT", Source: FindingSourceOperator}}},
		"revise, no review": {[]ReviewEntry{operator}, []Finding{{Message: "operator revision: MIT", Source: FindingSourceOperator}}},
	} {
		cp := &Checkpoint{State: CheckpointState{Reviews: tc.reviews}}
		got := cp.RevisionFindings()
		require.Equal(t, tc.want, got, name)
		if len(got) > 0 {
			got[0].Message = "changed"
			require.NotEqual(t, "changed", cp.State.Reviews[len(cp.State.Reviews)-1].Findings[0].Message, "%s: a copy", name)
		}
	}
}
