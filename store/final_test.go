package store

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

// TestFinalArtifactRef: the final artifact is the last approved cycle's (an
// operator's accept over a verdict, which completed the capsule without an
// approval, the last reviewed cycle's), and only a completed capsule has
// one.
func TestFinalArtifactRef(t *testing.T) {
	t.Parallel()
	id := "5a6a2b3c-0000-4000-8000-000000000001"
	reviews := func(vs ...capsule.Verdict) []capsule.ReviewEntry {
		var out []capsule.ReviewEntry
		for i, v := range vs {
			out = append(out, capsule.ReviewEntry{Cycle: i + 1, Verdict: v})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		status  capsule.State
		reviews []capsule.ReviewEntry
		want    string
	}{
		{"approved first", capsule.Completed, reviews(capsule.Approved), "artifact:" + id + "/1"},
		{"approved after a revision", capsule.Completed, reviews(capsule.ChangesRequested, capsule.Approved), "artifact:" + id + "/2"},
		{"running", capsule.InProgress, reviews(capsule.Approved), ""},
		{"halted", capsule.Halted, reviews(capsule.Approved), ""},
		{"completed unreviewed", capsule.Completed, nil, ""},
		{"accepted over a verdict, recorded before approvals", capsule.Completed, reviews(capsule.ChangesRequested, capsule.Rejected), "artifact:" + id + "/2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := &capsule.Checkpoint{CapsuleID: id}
			cp.State.Status, cp.State.Reviews = tc.status, tc.reviews
			got, ok := FinalArtifactRef(cp)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.want != "", ok)
		})
	}
	_, ok := FinalArtifactRef(nil)
	require.False(t, ok)
}
