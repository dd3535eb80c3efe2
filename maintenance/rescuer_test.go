package maintenance_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/maintenance"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/sagatest"
	"github.com/sagad/sagad/store"
)

// TestRescuerSendsALostStepAgain: a capsule waits at PLANNING and its
// message is lost (the phase's stream is purged while the phase is paused).
// Nothing would ever move it; the rescuer sees its checkpoint quiet with
// nothing queued for PLANNING, sends the step again, and the capsule
// completes — counted in sagad_capsules_rescued_total.
func TestRescuerSendsALostStepAgain(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.BuildInfo{})
	f := sagatest.Run(t, func(c *pipeline.Config) {
		c.Metrics = m
		c.RescueAfter = 500 * time.Millisecond
	})
	ctx := context.Background()
	// The pipeline's own admin: its pause view has the pause at once, so
	// REALITY_ANCHOR writes its advance into the paused PLANNING (not
	// deferred) and status says PLANNING.
	a := f.Pipeline.Admin()
	require.NoError(t, a.PausePhase(ctx, capsule.Planning))
	doc := f.Own(t, capsuletest.New())
	f.Publish(t, doc.Sealed(t))
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		s, err := f.Client.Status(ctx, doc.ID())
		return err == nil && s.Phase == int(capsule.Planning)
	}, "the capsule never reached PLANNING")
	planning, err := f.JS.Stream(ctx, store.PhaseStream(capsule.Planning))
	require.NoError(t, err)
	require.NoError(t, planning.Purge(ctx)) // the message is lost
	require.NoError(t, a.ResumePhase(ctx, capsule.Planning))

	s := f.Wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State, "the rescuer sent the lost step again")
	require.Equal(t, int64(1), f.Executed.Load())
	rescued := sagatest.Counter(t, reg, "sagad_capsules_rescued_total", "", "")
	require.GreaterOrEqual(t, rescued, 1.0)
}

// lostAtPlanning publishes a capsule on f and loses its PLANNING message
// (the stream purged while the phase is paused), leaving PLANNING resumed
// and the capsule with no message: only a rescuer moves it on.
func lostAtPlanning(t *testing.T, f *sagatest.Bundle) capsuletest.Doc {
	t.Helper()
	ctx := context.Background()
	a := f.Admin(t)
	require.NoError(t, a.PausePhase(ctx, capsule.Planning))
	doc := f.Own(t, capsuletest.New())
	f.Publish(t, doc.Sealed(t))
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		s, err := f.Client.Status(ctx, doc.ID())
		return err == nil && s.Phase == int(capsule.Planning)
	}, "the capsule never reached PLANNING")
	planning, err := f.JS.Stream(ctx, store.PhaseStream(capsule.Planning))
	require.NoError(t, err)
	require.NoError(t, planning.Purge(ctx))
	require.NoError(t, a.ResumePhase(ctx, capsule.Planning))
	return doc
}

// TestRescuerFindsAnotherWritersCapsule: every checkpoint of the capsule is
// written by a sagad whose rescuer is off, on a store the rescuer does not
// share: the rescuer learns of it only by its looks at the bucket (not by
// its own process's writes), and still sends the lost step again after
// After.
func TestRescuerFindsAnotherWritersCapsule(t *testing.T) {
	t.Parallel()
	f := sagatest.Run(t, func(c *pipeline.Config) { c.RescueAfter = -1 })
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.BuildInfo{})
	st, err := store.Open(context.Background(), f.JS)
	require.NoError(t, err)
	r := maintenance.NewRescuer(st, maintenance.RescuerConfig{Logger: f.Logger, Metrics: m, After: 500 * time.Millisecond})
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(r.Stop)

	doc := lostAtPlanning(t, f)
	s := f.Wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State, "the rescuer sent the other writer's lost step again")
	require.GreaterOrEqual(t, sagatest.Counter(t, reg, "sagad_capsules_rescued_total", "", ""), 1.0)
}

// TestRescuerTakesOverFromAStoppedSagad: a sagad without a rescuer took the
// capsule to PLANNING and stopped; its message is lost. A sagad started
// afterwards finds it at its rescuer's first look, and the capsule
// completes there.
func TestRescuerTakesOverFromAStoppedSagad(t *testing.T) {
	t.Parallel()
	f := sagatest.Run(t, func(c *pipeline.Config) { c.RescueAfter = -1 })
	doc := lostAtPlanning(t, f)
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	f.Pipeline.Stop(stopCtx)
	cancel()

	reg := prometheus.NewRegistry()
	cfg := f.Config
	cfg.Metrics = metrics.New(reg, metrics.BuildInfo{})
	cfg.RescueAfter = 500 * time.Millisecond
	f.Start(t, cfg)
	s := f.Wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State, "the new sagad's rescuer sent the stopped one's lost step again")
	require.Equal(t, int64(1), f.Executed.Load())
	require.GreaterOrEqual(t, sagatest.Counter(t, reg, "sagad_capsules_rescued_total", "", ""), 1.0)
}

// TestRescuerSendsALostDeferredStepAgain: a capsule's checkpoint stands at
// REALITY_ANCHOR while its message, naming the deferred advances of
// REALITY_ANCHOR, PLANNING and AUTOMATED_GATES, waits at EXECUTION (package pipeline); that message is
// lost. The rescuer looks at every queue the message may wait in, finds
// them empty, sends REALITY_ANCHOR's step again, and the capsule completes once.
func TestRescuerSendsALostDeferredStepAgain(t *testing.T) {
	t.Parallel()
	f := sagatest.Run(t, func(c *pipeline.Config) {
		c.RescueAfter = 500 * time.Millisecond
		c.NoPauseView = true // a pause this sagad has not seen yet: the advances defer
	})
	ctx := context.Background()
	a := f.Admin(t)
	require.NoError(t, a.PausePhase(ctx, capsule.Execution))
	doc := f.Own(t, capsuletest.New())
	f.Publish(t, doc.Sealed(t))
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		return f.PhaseConsumer(t, capsule.Execution).NumPending == 1
	}, "the capsule's message never waited at EXECUTION")
	s, err := f.Client.Status(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, int(capsule.RealityAnchor), s.Phase, "the deferred advances are not written")
	execution, err := f.JS.Stream(ctx, store.PhaseStream(capsule.Execution))
	require.NoError(t, err)
	require.NoError(t, execution.Purge(ctx)) // the message is lost
	require.NoError(t, a.ResumePhase(ctx, capsule.Execution))

	s = f.Wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State, "the rescuer sent the lost step again")
	require.Len(t, s.History, 7)
	require.Equal(t, int64(1), f.Executed.Load())
}
