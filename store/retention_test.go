package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/sagatest"
	"github.com/sagad/sagad/store"
)

// TestRetentionForgetsEndedCapsules: once the retention has passed, an ended
// capsule's checkpoint and bytes are gone from JetStream (no subject left
// for the server to index), its outcome stays, and a capsule still running
// is untouched — also when its artifact outlived the retention.
func TestRetentionForgetsEndedCapsules(t *testing.T) {
	t.Parallel()
	f := sagatest.Run(t, func(c *pipeline.Config) { c.Retention = time.Second })
	ctx := context.Background()
	done := capsuletest.New()
	f.Publish(t, done.Sealed(t))
	halted := f.Own(t, capsuletest.New().Set("spec.approved", false))
	f.Publish(t, halted.Sealed(t))
	require.Equal(t, capsule.Completed, f.Wait(t, done.ID()).State)
	require.Equal(t, capsule.Halted, f.Wait(t, halted.ID()).State)
	// One that waits for an operator has no outcome and must stay.
	waiting := f.Own(t, capsuletest.New().Set("review.operator_gate", true))
	f.Publish(t, waiting.Sealed(t))
	f.WaitState(t, waiting.ID(), capsule.WaitingForOperator)

	subjects := func(stream string) uint64 {
		s, err := f.JS.Stream(ctx, stream)
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		return info.State.NumSubjects
	}
	natstest.Eventually(t, 15*time.Second, 50*time.Millisecond, func() bool {
		_, err1 := f.Client.Status(ctx, done.ID())
		_, err2 := f.Client.Status(ctx, halted.ID())
		return errors.Is(err1, store.ErrNotFound) && errors.Is(err2, store.ErrNotFound) &&
			// Only the waiting capsule's checkpoint and bytes; artifacts go
			// a retention after they were written.
			subjects("KV_"+store.CheckpointsBucket) == 1 && subjects("KV_"+store.CapsulesBucket) == 1 &&
			subjects("OBJ_"+store.ArtifactsBucket) == 0 && subjects("KV_"+store.ArtifactRecordsBucket) == 0
	}, "ended capsules never forgotten")
	f.RequireOutcomes(t, 2, "outcomes are kept")
	a := f.Admin(t)
	s, err := a.Decide(ctx, waiting.ID(), admin.DecisionAccept, "fine", "carol")
	require.NoError(t, err)
	require.NotEqual(t, capsule.Halted, s.State)
	require.Equal(t, capsule.Completed, f.Wait(t, waiting.ID()).State)

	// A capsule ended by an operator (sagactl, another process) expires too:
	// the admin reads sagad's retention from the bucket.
	other := f.Own(t, capsuletest.New().Set("review.operator_gate", true))
	f.Publish(t, other.Sealed(t))
	f.WaitState(t, other.ID(), capsule.WaitingForOperator)
	s, err = f.Admin(t).Cancel(ctx, other.ID(), "not needed", "carol")
	require.NoError(t, err)
	require.Equal(t, capsule.Cancelled, s.State)
	natstest.Eventually(t, 15*time.Second, 50*time.Millisecond, func() bool {
		_, err := f.Client.Status(ctx, other.ID())
		return errors.Is(err, store.ErrNotFound)
	}, "cancelled capsule never forgotten")
}
