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
	require.NoError(t, planning.Purge(ctx)) // the message is lost
	require.NoError(t, a.ResumePhase(ctx, capsule.Planning))

	s := f.Wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State, "the rescuer sent the lost step again")
	require.Equal(t, int64(1), f.Executed.Load())
	rescued := sagatest.Counter(t, reg, "sagad_capsules_rescued_total", "", "")
	require.GreaterOrEqual(t, rescued, 1.0)
}
