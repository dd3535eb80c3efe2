package admin

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

func TestListQueryKeep(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cp := &capsule.Checkpoint{Key: "k", WaveID: "w-1", Producer: "bob", CreatedAt: t0,
		Chain: &capsule.ChainStep{ID: "comp", Step: 1, Run: 2},
		State: capsule.CheckpointState{Status: capsule.Halted, HaltReason: "executor_failed:timeout"}}
	kinds := map[string]string{"k": "demo"}
	for _, tc := range []struct {
		name string
		q    ListQuery
		want bool
	}{
		{"no filter", ListQuery{}, true},
		{"every filter matching", ListQuery{State: capsule.Halted, Wave: "w-1", Kind: "demo", HaltReason: "executor_failed",
			Composition: "comp", Producer: "bob", Since: t0}, true},
		{"the whole halt reason", ListQuery{HaltReason: "executor_failed:timeout"}, true},
		{"another halt reason", ListQuery{HaltReason: "budget_exceeded"}, false},
		{"another state", ListQuery{State: capsule.Completed}, false},
		{"another wave", ListQuery{Wave: "w-2"}, false},
		{"another kind", ListQuery{Kind: "other"}, false},
		{"the composition's run", ListQuery{Composition: "comp#2"}, true},
		{"another run", ListQuery{Composition: "comp#1"}, false},
		{"another composition", ListQuery{Composition: "comp2"}, false},
		{"another producer", ListQuery{Producer: "ann"}, false},
		{"created before since", ListQuery{Since: t0.Add(time.Second)}, false},
	} {
		require.Equal(t, tc.want, tc.q.keep(kinds)(cp), tc.name)
	}
	require.False(t, ListQuery{Composition: "comp"}.keep(nil)(&capsule.Checkpoint{}), "not a step")
	require.True(t, ListQuery{Composition: "c#1"}.keep(nil)(&capsule.Checkpoint{Chain: &capsule.ChainStep{ID: "c"}}), "run 1 is recorded as 0")
}
