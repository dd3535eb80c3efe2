package console

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/store"
)

// TestRunTracker: a loop's rounds before its last, and every capsule of a
// run once a later run appears (whichever record is seen first), are
// superseded; the latest run's last round never is.
func TestRunTracker(t *testing.T) {
	t.Parallel()
	loop := func(run int, rounds ...[]string) *store.ChainRecord {
		r := &store.ChainRecord{ChainID: "c", Producer: "p", Run: run, Steps: rounds[len(rounds)-1]}
		l := store.LoopRun{Steps: []int{0, 1}, MaxRounds: 3, Round: len(rounds)}
		for _, ids := range rounds {
			l.Rounds = append(l.Rounds, store.LoopRound{IDs: ids})
		}
		r.Loops = []store.LoopRun{l}
		return r
	}
	for _, tc := range []struct {
		name    string
		records []*store.ChainRecord
		want    []string
	}{
		{"one round", []*store.ChainRecord{loop(1, []string{"a", "b"})}, nil},
		{"second round", []*store.ChainRecord{loop(1, []string{"a", "b"}), loop(1, []string{"a", "b"}, []string{"c", "d"})}, []string{"a", "b"}},
		{"later run after", []*store.ChainRecord{loop(1, []string{"a", "b"}), loop(2, []string{"e", "f"})}, []string{"a", "b"}},
		{"later run first", []*store.ChainRecord{loop(2, []string{"e", "f"}), loop(1, []string{"a", "b"}, []string{"c", "d"})}, []string{"a", "b", "c", "d"}},
		{"other producer", []*store.ChainRecord{loop(1, []string{"a", "b"}), {ChainID: "c", Producer: "q", Run: 2, Steps: []string{"x"}}}, nil},
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
