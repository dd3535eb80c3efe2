package console

import (
	"github.com/sagad/sagad/compose"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRunTracker: a loop's rounds before its last, and every capsule of a
// run once a later run appears (whichever record is seen first), are
// superseded; the latest run's last round never is.
func TestRunTracker(t *testing.T) {
	t.Parallel()
	loop := func(run int, rounds ...[]string) *compose.Record {
		r := &compose.Record{CompositionID: "c", Producer: "p", Run: run, Steps: rounds[len(rounds)-1]}
		l := compose.LoopRun{Steps: []int{0, 1}, MaxRounds: 3, Round: len(rounds)}
		for _, ids := range rounds {
			l.Rounds = append(l.Rounds, compose.LoopRound{IDs: ids})
		}
		r.Loops = []compose.LoopRun{l}
		return r
	}
	for _, tc := range []struct {
		name    string
		records []*compose.Record
		want    []string
	}{
		{"one round", []*compose.Record{loop(1, []string{"a", "b"})}, nil},
		{"second round", []*compose.Record{loop(1, []string{"a", "b"}), loop(1, []string{"a", "b"}, []string{"c", "d"})}, []string{"a", "b"}},
		{"later run after", []*compose.Record{loop(1, []string{"a", "b"}), loop(2, []string{"e", "f"})}, []string{"a", "b"}},
		{"later run first", []*compose.Record{loop(2, []string{"e", "f"}), loop(1, []string{"a", "b"}, []string{"c", "d"})}, []string{"a", "b", "c", "d"}},
		{"other producer", []*compose.Record{loop(1, []string{"a", "b"}), {CompositionID: "c", Producer: "q", Run: 2, Steps: []string{"x"}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newRunTracker()
			got := []string{}
			seen := map[string]bool{}
			for _, r := range tc.records {
				for _, id := range tr.record(r) {
					if !seen[id] {
						seen[id] = true
						got = append(got, id)
					}
				}
			}
			require.ElementsMatch(t, tc.want, got)
		})
	}
}
