package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/pipeline"
)

// TestDependenciesWait: a capsule published before its dependency completed
// waits (state waiting, waiting_on dependencies, the pending ids) before
// anything is spent, and goes on by itself once the dependency completes; a
// capsule whose dependency halts halts with dependency_failed:<id>; one whose
// dependency is never published halts with dependency_missing:<id> after the
// configured wait.
func TestDependenciesWait(t *testing.T) {
	t.Parallel()
	f := setupWith(t, func(c *pipeline.Config) {
		c.SweepInterval = 50 * time.Millisecond
		c.DependencyTimeout = 2 * time.Second
	})
	ctx := context.Background()
	a := f.admin(t)

	dep := f.own(t, capsuletest.New().Set("task.kind", "slow")) // held in EXECUTION until released
	waiter := f.own(t, capsuletest.New().Set("depends_on", []any{dep.ID()}))
	failing := f.own(t, capsuletest.New().Stub(map[string]any{"fail": "no"}))
	onFailing := f.own(t, capsuletest.New().Set("depends_on", []any{failing.ID()}))
	ghost := capsuletest.NewID()
	onGhost := f.own(t, capsuletest.New().Set("depends_on", []any{ghost}))

	f.publish(t, dep.Sealed(t))
	f.publish(t, waiter.Sealed(t))
	s := f.waitState(t, waiter.ID(), capsule.Waiting)
	require.Equal(t, "dependencies", s.WaitingOn)
	require.Equal(t, []string{dep.ID()}, s.Pending)
	require.Equal(t, int(capsule.AutomatedGates), s.Phase, "nothing is spent while it waits")
	_, err := a.Pause(ctx, waiter.ID(), "", "x")
	require.ErrorIs(t, err, admin.ErrRefused)

	f.gate <- struct{}{} // the dependency finishes its execution and completes
	require.Equal(t, capsule.Completed, f.wait(t, dep.ID()).State)
	s = f.wait(t, waiter.ID())
	require.Equal(t, capsule.Completed, s.State, "it went on by itself")
	require.Empty(t, s.Pending)

	f.publish(t, failing.Sealed(t))
	f.publish(t, onFailing.Sealed(t))
	s = f.wait(t, onFailing.ID())
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, capsule.DependencyFailed(failing.ID()).String(), s.HaltReason)

	f.publish(t, onGhost.Sealed(t))
	s = f.wait(t, onGhost.ID())
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, capsule.DependencyMissing(ghost).String(), s.HaltReason)
}
