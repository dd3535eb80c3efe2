package adminsvc

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/compose"
)

// TestSelectRuns: a composition list is newest first (ties in the order
// given: id, producer, run), keeps the state and producer asked for (""
// being sagad's own, absent any) and stops at the limit (0: 100).
func TestSelectRuns(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	runs := []compose.Listed{
		{CompositionID: "a", Run: 1, State: "completed", CreatedAt: at},
		{CompositionID: "a", Run: 2, State: "running", CreatedAt: at.Add(2 * time.Minute)},
		{CompositionID: "b", Producer: "bob", Run: 1, State: "completed", CreatedAt: at.Add(time.Minute)},
		{CompositionID: "c", Run: 1, State: "partial", CreatedAt: at.Add(time.Minute)},
	}
	names := func(l []compose.Listed) []string {
		out := []string{}
		for _, r := range l {
			out = append(out, r.CompositionID+"#"+string(rune('0'+r.Run)))
		}
		return out
	}
	own, bob := "", "bob"
	for _, tc := range []struct {
		name string
		req  CompositionListRequest
		want []string
	}{
		{"all", CompositionListRequest{}, []string{"a#2", "b#1", "c#1", "a#1"}},
		{"limit", CompositionListRequest{Limit: 2}, []string{"a#2", "b#1"}},
		{"state", CompositionListRequest{State: "completed"}, []string{"b#1", "a#1"}},
		{"sagad's own", CompositionListRequest{Producer: &own}, []string{"a#2", "c#1", "a#1"}},
		{"a producer", CompositionListRequest{Producer: &bob}, []string{"b#1"}},
		{"none", CompositionListRequest{State: "cancelled"}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, names(selectRuns(append([]compose.Listed{}, runs...), tc.req)))
		})
	}
}
