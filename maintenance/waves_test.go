package maintenance_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/sagatest"
)

// TestWaveLeakedReservationReleased: a reservation left by a capsule that
// had already ended (an admission racing a cancel) or that sagad does not
// know is released by the sweeper once a capsule waits for the wave.
func TestWaveLeakedReservationReleased(t *testing.T) {
	t.Parallel()
	f := sagatest.Run(t, func(c *pipeline.Config) { c.SweepInterval = 50 * time.Millisecond })
	ctx := context.Background()
	tr := f.Store.Budgets
	done := capsuletest.New()
	f.Publish(t, done.Sealed(t))
	require.Equal(t, capsule.Completed, f.Wait(t, done.ID()).State)
	cap2000 := int64(2000)
	_, err := tr.ChangeWave(ctx, "wl", budget.WaveChange{Tokens: &cap2000})
	require.NoError(t, err)
	for _, holder := range []string{done.ID(), capsuletest.NewID()} {
		a, err := tr.Reserve(ctx, "wl", holder, capsule.Budget{Tokens: 1000, Dollars: 1})
		require.NoError(t, err)
		require.True(t, a.Admitted)
	}
	d := f.WaveDoc(t, "wl", "stub")
	f.Publish(t, d.Sealed(t))
	s := f.Wait(t, d.ID())
	require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool { return f.Wave(t, "wl").Holders == 0 }, "all released")
}
