package pipeline_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/pipeline"
)

// alwaysFails fails every call with exit status 1, which the default
// failure policy retries once; it counts its calls.
type alwaysFails struct{ n *atomic.Int64 }

func (e alwaysFails) Execute(context.Context, executors.Request) (executors.Result, error) {
	e.n.Add(1)
	return executors.Result{}, &executors.FailedError{Detail: "exit 1", ExitCode: executors.ExitFailure}
}

// TestChildLimitAttempts: a parent allowing its children one EXECUTION
// call (budget.child.max_attempts 1) has a child whose executor fails in a
// way the policy retries: the retry is never made, the child halts
// child_limit_exceeded:attempts after its one call, and its checkpoint
// records the limit it was received with.
func TestChildLimitAttempts(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	f := setupDepth(t, 0, func(c *pipeline.Config) {
		c.Executors.RegisterExecutor("failing", alwaysFails{n: &n})
	})
	ctx := context.Background()
	root := f.delegate(t, "").Set("budget.child", map[string]any{"max_attempts": 1})
	f.publish(t, root.Sealed(t))
	call := f.next(t, root.ID())

	child := f.delegate(t, root.ID()).Set("budget.tokens", 1000).Set("task.kind", "failing")
	f.publishChild(t, child, call.token)
	s := f.wait(t, child.ID())
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, "child_limit_exceeded:attempts", s.HaltReason)
	require.EqualValues(t, 1, n.Load(), "the retry the policy wanted is not made")
	cp, _, err := f.bundle.Store.Checkpoints.Get(ctx, child.ID())
	require.NoError(t, err)
	require.Equal(t, &capsule.ChildLimit{MaxAttempts: 1}, cp.ChildLimit)
	require.Len(t, cp.State.AttemptLog, 1, "the one failed call, retried")

	// The limit binds the children, not the capsule declaring it.
	call.done <- capsule.Usage{}
	require.Equal(t, capsule.Completed, f.wait(t, root.ID()).State)
	cp, _, err = f.bundle.Store.Checkpoints.Get(ctx, root.ID())
	require.NoError(t, err)
	require.Nil(t, cp.ChildLimit)
}

// TestChildLimitWallTime: the parent's budget.child.max_wall_time from
// the child's reception is the child's deadline in force (recorded among
// its overrides), so it is held to it like a deadline: here it is parked
// deadline_approaching at once (the fixture warns an hour ahead) and the
// sweeper halts it when the wall time passes, with the limit as its cause:
// child_limit_exceeded:wall_time.
func TestChildLimitWallTime(t *testing.T) {
	t.Parallel()
	f := setupDepth(t, 0)
	root := f.delegate(t, "").Set("budget.child", map[string]any{"max_wall_time": "2s"})
	f.publish(t, root.Sealed(t))
	call := f.next(t, root.ID())

	child := f.delegate(t, root.ID()).Set("budget.tokens", 1000)
	f.publishChild(t, child, call.token)
	cp := f.bundle.WaitCheckpoint(t, child.ID(), func(c *capsule.Checkpoint) bool { return c.State.Status.Terminal() })
	require.Equal(t, capsule.Halted, cp.State.Status)
	require.Equal(t, "child_limit_exceeded:wall_time", cp.State.HaltReason)
	require.NotNil(t, cp.ChildLimit)
	require.NotNil(t, cp.ChildLimit.WallUntil)
	require.Equal(t, cp.CreatedAt.Add(2*time.Second), *cp.ChildLimit.WallUntil)
	require.True(t, cp.ChildLimit.WallUntil.Equal(*cp.State.Overrides.Deadline), "the wall time is the deadline in force")
	require.False(t, cp.UpdatedAt.Before(*cp.ChildLimit.WallUntil), "halted once the wall time passed")

	call.done <- capsule.Usage{}
	require.Equal(t, capsule.Completed, f.wait(t, root.ID()).State)
}

// TestChildLimitInvalid: budget.child out of its bounds halts the capsule
// declaring it at RECEPTION, schema_invalid naming the member.
func TestChildLimitInvalid(t *testing.T) {
	t.Parallel()
	f := setupDepth(t, 0)
	for ptr, child := range map[string]map[string]any{
		"/budget/child/max_attempts":  {"max_attempts": 11},
		"/budget/child/max_wall_time": {"max_wall_time": "169h"},
	} {
		d := f.delegate(t, "").Set("budget.child", child)
		f.publish(t, d.Sealed(t))
		s := f.wait(t, d.ID())
		require.Equal(t, capsule.Halted, s.State)
		require.Equal(t, "schema_invalid:"+ptr, s.HaltReason)
	}
}
