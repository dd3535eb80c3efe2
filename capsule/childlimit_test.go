package capsule_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

// TestChildBudgetInvalid: budget.child's bounds, the ones the schema leaves
// to RECEPTION.
func TestChildBudgetInvalid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		b    *capsule.ChildBudget
		ptr  string
		wall time.Duration
	}{
		{nil, "", 0},
		{&capsule.ChildBudget{}, "", 0},
		{&capsule.ChildBudget{MaxAttempts: 1, MaxWallTime: "30m"}, "", 30 * time.Minute},
		{&capsule.ChildBudget{MaxAttempts: 10, MaxWallTime: "168h"}, "", 168 * time.Hour},
		{&capsule.ChildBudget{MaxAttempts: 11}, "/budget/child/max_attempts", 0},
		{&capsule.ChildBudget{MaxAttempts: -1}, "/budget/child/max_attempts", 0},
		{&capsule.ChildBudget{MaxWallTime: "168h1s"}, "/budget/child/max_wall_time", 168*time.Hour + time.Second},
		{&capsule.ChildBudget{MaxWallTime: "0s"}, "/budget/child/max_wall_time", 0},
		{&capsule.ChildBudget{MaxWallTime: "-5m"}, "/budget/child/max_wall_time", -5 * time.Minute},
		{&capsule.ChildBudget{MaxWallTime: "soon"}, "/budget/child/max_wall_time", 0},
		{&capsule.ChildBudget{MaxWallTime: "7d"}, "/budget/child/max_wall_time", 0},
	} {
		ptr, why := tc.b.Invalid()
		require.Equal(t, tc.ptr, ptr, "%+v", tc.b)
		require.Equal(t, ptr == "", why == "", "%+v", tc.b)
		require.Equal(t, tc.wall, tc.b.WallTime(), "%+v", tc.b)
	}
}

// TestExecutionCalls: one call per earlier cycle of the run, plus the
// failed EXECUTION calls the log records for them; a reviewer's failures,
// the current cycle's and an earlier run's are not counted.
func TestExecutionCalls(t *testing.T) {
	t.Parallel()
	cp := &capsule.Checkpoint{CycleBase: 2}
	cp.State.AttemptLog = []capsule.FailedAttempt{
		{Phase: capsule.Execution, Cycle: 2, Attempt: 1}, // an earlier run's
		{Phase: capsule.Execution, Cycle: 3, Attempt: 1},
		{Phase: capsule.Execution, Cycle: 3, Attempt: 2},
		{Phase: capsule.ReviewPhase, Cycle: 3, Attempt: 1},
		{Phase: capsule.Execution, Cycle: 4, Attempt: 1},
		{Phase: capsule.Execution, Cycle: 5, Attempt: 1}, // the current cycle's
	}
	for cycle, want := range map[int]int{3: 0, 4: 3, 5: 5} {
		require.Equal(t, want, cp.ExecutionCalls(cycle), "cycle %d", cycle)
	}
	require.Equal(t, 0, (&capsule.Checkpoint{}).ExecutionCalls(1))
}

// TestDeadlineHalt: a deadline in force that is the child limit's wall
// time halts child_limit_exceeded:wall_time; any other, deadline_exceeded.
func TestDeadlineHalt(t *testing.T) {
	t.Parallel()
	own := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	wall := own.Add(-time.Hour)
	later := own.Add(time.Hour)
	for name, tc := range map[string]struct {
		limit    *capsule.ChildLimit
		override *time.Time
		want     string
	}{
		"root":              {nil, nil, "deadline_exceeded:EXECUTION"},
		"attempts only":     {&capsule.ChildLimit{MaxAttempts: 1}, nil, "deadline_exceeded:EXECUTION"},
		"wall binds":        {&capsule.ChildLimit{WallUntil: &wall}, &wall, "child_limit_exceeded:wall_time"},
		"wall does not":     {&capsule.ChildLimit{WallUntil: &later}, nil, "deadline_exceeded:EXECUTION"},
		"operator extended": {&capsule.ChildLimit{WallUntil: &wall}, &later, "deadline_exceeded:EXECUTION"},
	} {
		cp := &capsule.Checkpoint{ChildLimit: tc.limit}
		if tc.override != nil {
			cp.State.Overrides = &capsule.Overrides{Deadline: tc.override}
		}
		require.Equal(t, tc.want, cp.DeadlineHalt(capsule.Execution, own).String(), name)
	}
}
