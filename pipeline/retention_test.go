package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
)

// TestRetentionForgetsEndedCapsules: once the retention has passed, an ended
// capsule's checkpoint, bytes and artifacts are gone from JetStream (no
// subject left behind for the server to index), its outcome stays, and a
// capsule still running is untouched.
func TestRetentionForgetsEndedCapsules(t *testing.T) {
	t.Parallel()
	f := setupWith(t, func(c *pipeline.Config) { c.Retention = time.Second })
	ctx := context.Background()
	done := capsuletest.New()
	f.publish(t, done.Sealed(t))
	halted := f.own(t, capsuletest.New().Set("spec.approved", false))
	f.publish(t, halted.Sealed(t))
	require.Equal(t, capsule.Completed, f.wait(t, done.ID()).State)
	require.Equal(t, capsule.Halted, f.wait(t, halted.ID()).State)
	// One that waits for an operator has no outcome and must stay.
	waiting := f.own(t, capsuletest.New().Set("review.operator_gate", true))
	f.publish(t, waiting.Sealed(t))
	f.waitState(t, waiting.ID(), capsule.WaitingForOperator)

	subjects := func(stream string) uint64 {
		s, err := f.js.Stream(ctx, stream)
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		return info.State.NumSubjects
	}
	natstest.Eventually(t, 15*time.Second, 50*time.Millisecond, func() bool {
		_, err1 := f.client.Status(ctx, done.ID())
		_, err2 := f.client.Status(ctx, halted.ID())
		return errors.Is(err1, pipeline.ErrNotFound) && errors.Is(err2, pipeline.ErrNotFound)
	}, "ended capsules never forgotten")
	s, err := f.client.Status(ctx, waiting.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.WaitingForOperator, s.State)
	require.EqualValues(t, 1, subjects("KV_"+pipeline.CheckpointsBucket), "only the waiting capsule's checkpoint")
	require.EqualValues(t, 1, subjects("KV_"+pipeline.CapsulesBucket), "only the waiting capsule's bytes")
	// The waiting capsule's artifact: its chunk and its metadata.
	require.EqualValues(t, 2, subjects("OBJ_"+pipeline.ArtifactsBucket))
	require.EqualValues(t, 2, countOutcomes(t, f), "outcomes are kept")
}
