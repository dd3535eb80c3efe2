package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/locks"
	"github.com/sagad/sagad/pipeline"
)

// TestExecutionFromStaleCacheReleasesLocks: EXECUTION starts from this
// process's cached checkpoint, which a cancel by another process (the admin
// has a cache of its own) leaves stale. The stale run takes the capsule's
// locks before its claim finds the cache out of date; the run on the real
// checkpoint then finds the capsule cancelled, and releases the locks
// again. The executor is never called for the cancelled capsule.
func TestExecutionFromStaleCacheReleasesLocks(t *testing.T) {
	t.Parallel()
	// One worker per phase: the first capsule's slow executor holds
	// EXECUTION's only worker while the second's message waits behind it.
	f := setupWith(t, func(c *pipeline.Config) { c.Workers = 1 })
	a := f.admin(t)
	ctx := context.Background()
	first := f.own(t, capsuletest.New().Set("task.kind", "slow"))
	f.publish(t, first.Sealed(t))
	eventuallyExecuted(t, f, 1)

	second := f.own(t, capsuletest.New())
	f.publish(t, second.Sealed(t))
	// Its message waits at EXECUTION; its checkpoint stands at PLANNING
	// (EXECUTION's claim writes the deferred advances), as the cache has it.
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		info := phaseConsumer(t, f, capsule.Execution)
		return info.NumPending+uint64(info.NumAckPending) == 2 // the first's, in flight, and the second's
	}, "second capsule queued for EXECUTION")
	s, err := a.Cancel(ctx, second.ID(), "not needed", "alice")
	require.NoError(t, err)
	require.Equal(t, capsule.Cancelled, s.State)

	f.gate <- struct{}{} // the first capsule finishes; the second's message is handled
	require.Equal(t, capsule.Completed, f.wait(t, first.ID()).State)
	waitDrained(t, f)

	lm, err := locks.New(ctx, f.js, locks.Config{})
	require.NoError(t, err)
	holder, err := lm.Holder(ctx, "own-"+second.ID()+".txt")
	require.NoError(t, err)
	require.Empty(t, holder, "the locks the stale run took are released")
	s, err = f.client.Status(ctx, second.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.Cancelled, s.State)
	require.Equal(t, int64(1), f.executed.Load(), "the cancelled capsule's executor never ran")
}
