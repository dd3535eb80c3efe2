package maintenance_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/maintenance"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/sagatest"
)

// clock is a settable clock for a sweeper.
type clock struct{ at atomic.Pointer[time.Time] }

func newClock() *clock { c := &clock{}; c.set(time.Now()); return c }

func (c *clock) set(t time.Time)     { c.at.Store(&t) }
func (c *clock) now() time.Time      { return *c.at.Load() }
func (c *clock) add(d time.Duration) { c.set(c.now().Add(d)) }

// quietSweeps gives the pipeline's own sweeper, on the real clock, timeouts
// no test reaches: what halts a capsule is the sweeper the test drives.
func quietSweeps(c *pipeline.Config) {
	c.ExternalTimeout = 24 * time.Hour
	c.DependencyTimeout = 24 * time.Hour
}

// TestSweeperHaltsOverdueExternalWork: a capsule paused on work an executor
// accepted is left alone while the result may still come; once the
// external timeout has passed, a sweep halts it with executor_failed,
// emits its outcome once, and a later sweep changes nothing.
func TestSweeperHaltsOverdueExternalWork(t *testing.T) {
	t.Parallel()
	f := sagatest.Run(t, quietSweeps)
	ctx := context.Background()
	doc := f.Own(t, capsuletest.New().Set("task.kind", "accepting"))
	f.Publish(t, doc.Sealed(t))
	paused := f.WaitState(t, doc.ID(), capsule.Paused)
	require.True(t, paused.AwaitingExternal)

	clk := newClock()
	sw := maintenance.NewSweeper(f.Store, f.Admin(t), maintenance.SweeperConfig{Logger: sagatest.Logger(t), Now: clk.now, ExternalTimeout: time.Hour})
	sw.Sweep(ctx)
	still, err := f.Client.Status(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, paused, still, "the result may still come")

	clk.add(2 * time.Hour)
	sw.Sweep(ctx)
	s := f.WaitState(t, doc.ID(), capsule.Halted)
	require.Equal(t, "executor_failed:no result for cycle 1 within 1h0m0s", s.HaltReason)
	f.RequireOutcomes(t, 1)

	sw.Sweep(ctx)
	again, err := f.Client.Status(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, s.History, again.History, "a halted capsule is no one's to sweep")
	f.RequireOutcomes(t, 1)
}

// TestSweeperHaltsMissingDependency: a capsule waits for a dependency
// sagad never received; a running sweeper halts it with
// dependency_missing:<id> once the dependency timeout has passed, and Stop
// returns once the sweeper has stopped.
func TestSweeperHaltsMissingDependency(t *testing.T) {
	t.Parallel()
	f := sagatest.Run(t, quietSweeps)
	ctx := context.Background()
	ghost := capsuletest.NewID()
	doc := f.Own(t, capsuletest.New().Set("depends_on", []any{ghost}))
	f.Publish(t, doc.Sealed(t))
	w := f.WaitState(t, doc.ID(), capsule.Waiting)
	require.Equal(t, []string{ghost}, w.Pending)

	clk := newClock()
	sw := maintenance.NewSweeper(f.Store, f.Admin(t), maintenance.SweeperConfig{
		Logger: sagatest.Logger(t), Now: clk.now, Interval: 10 * time.Millisecond, DependencyTimeout: time.Hour,
	})
	sw.Sweep(ctx)
	still, err := f.Client.Status(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.Waiting, still.State, "the dependency may still come")

	clk.add(2 * time.Hour)
	sw.Start(ctx)
	t.Cleanup(sw.Stop)
	s := f.WaitState(t, doc.ID(), capsule.Halted)
	require.Equal(t, capsule.DependencyMissing(ghost).String(), s.HaltReason)
	require.Equal(t, int64(0), f.Executed.Load(), "nothing was spent on it")
	sw.Stop()
}

// TestSweeperHaltsPastDeadline: capsules parked past their deadline — one
// waiting for an operator's decision, one waiting for a dependency — are
// halted deadline_exceeded:<phase> by the sweep, once, however many
// sagads sweep at the same time; a later sweep changes nothing.
func TestSweeperHaltsPastDeadline(t *testing.T) {
	t.Parallel()
	f := sagatest.Run(t, quietSweeps)
	ctx := context.Background()
	gated := f.Own(t, capsuletest.New().Set("review.operator_gate", true))
	waiting := f.Own(t, capsuletest.New().Set("depends_on", []any{capsuletest.NewID()}))
	f.Publish(t, gated.Sealed(t))
	f.Publish(t, waiting.Sealed(t))
	f.WaitState(t, gated.ID(), capsule.WaitingForOperator)
	f.WaitState(t, waiting.ID(), capsule.Waiting)

	clk := newClock()
	sweepers := make([]*maintenance.Sweeper, 2)
	for i := range sweepers {
		a := admin.New(f.Store, admin.Config{Now: clk.now})
		sweepers[i] = maintenance.NewSweeper(f.Store, a, maintenance.SweeperConfig{Logger: sagatest.Logger(t), Now: clk.now})
	}
	sweepers[0].Sweep(ctx)
	for _, id := range []string{gated.ID(), waiting.ID()} {
		s, err := f.Client.Status(ctx, id)
		require.NoError(t, err)
		require.False(t, s.State.Terminal(), "%s: its deadline is an hour away", id)
	}

	clk.add(2 * time.Hour) // capsuletest's deadline is an hour after creation
	var wg sync.WaitGroup
	for _, sw := range sweepers {
		wg.Add(1)
		go func() { defer wg.Done(); sw.Sweep(ctx) }()
	}
	wg.Wait()
	for id, phase := range map[string]capsule.Phase{gated.ID(): capsule.Handoff, waiting.ID(): capsule.AutomatedGates} {
		s := f.WaitState(t, id, capsule.Halted)
		require.Equal(t, capsule.DeadlineExceeded(phase).String(), s.HaltReason)
		require.Equal(t, 1, f.CountEvents(t, id)[capsule.EventHalted], "halted once")
	}
	f.RequireOutcomes(t, 2)
	require.Equal(t, int64(1), f.Executed.Load(), "only the gated capsule ran, before its deadline")

	sweepers[1].Sweep(ctx)
	f.RequireOutcomes(t, 2)
	keys, err := f.Store.Continuations.Keys(ctx)
	require.NoError(t, err)
	require.Empty(t, keys, "no continuation left behind")
}
