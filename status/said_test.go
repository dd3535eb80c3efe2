package status_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/status"
)

// TestSaidOf: resume answers and operators' reviews, oldest first; a
// reviewer's review and an operator review without findings are not words
// a person said.
func TestSaidOf(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 28, 19, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	op := func(by string, cycle int, v capsule.Verdict, msg string, m int) capsule.ReviewEntry {
		return capsule.ReviewEntry{Cycle: cycle, ReviewerID: capsule.OperatorReviewerPrefix + by, Verdict: v, Findings: []capsule.Finding{{Message: msg}}, At: at(m)}
	}
	for _, tc := range []struct {
		name string
		st   capsule.CheckpointState
		want []status.Said
	}{
		{name: "nothing said", st: capsule.CheckpointState{Reviews: []capsule.ReviewEntry{{Cycle: 1, ReviewerID: "rv", Verdict: capsule.Approved, At: at(1)}}}},
		{
			name: "answers and decisions in time order",
			st: capsule.CheckpointState{
				Answers: []capsule.OperatorAnswer{{Text: "licence is MIT", By: "dana", At: at(1)}, {Text: "v2", At: at(5)}},
				Reviews: []capsule.ReviewEntry{
					{Cycle: 1, ReviewerID: "rv", Verdict: capsule.ChangesRequested, Findings: []capsule.Finding{{Message: "too long"}}, At: at(2)},
					op("carol", 1, capsule.ChangesRequested, machine.RevisionPrefix+"shorter", 3),
					{Cycle: 2, ReviewerID: capsule.OperatorReviewerPrefix + "x", Verdict: capsule.Approved, At: at(4)},
					op("erin", 2, capsule.Approved, machine.OperatorAcceptance+"CHANGES_REQUESTED of rv", 6),
					op("fay", 3, capsule.Rejected, machine.RejectionPrefix+"wrong target", 7),
				},
			},
			want: []status.Said{
				{Kind: status.SaidAnswer, Text: "licence is MIT", By: "dana", At: at(1)},
				{Kind: status.SaidRevise, Text: "shorter", By: "carol", Cycle: 1, At: at(3)},
				{Kind: status.SaidAnswer, Text: "v2", At: at(5)},
				{Kind: status.SaidAccept, Text: machine.OperatorAcceptance + "CHANGES_REQUESTED of rv", By: "erin", Cycle: 2, At: at(6)},
				{Kind: status.SaidReject, Text: "wrong target", By: "fay", Cycle: 3, At: at(7)},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cp := &capsule.Checkpoint{CapsuleID: "c1", Key: "c1", State: tc.st}
			require.Equal(t, tc.want, status.SaidOf(cp))
			require.Equal(t, tc.want, status.Of(cp).Said)
		})
	}
}
