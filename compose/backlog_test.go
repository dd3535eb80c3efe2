package compose_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// TestComposeIntakeFull: a compose request whose producer's intake has
// room for only part of the steps ("maximum messages per subject
// exceeded") used to fail part-way, leaving the run recorded running with
// steps nobody published until the same document was sent again. Now the
// reply names the steps that wait, composition status says sagad
// publishes them as room appears, and it does: the run completes.
func TestComposeIntakeFull(t *testing.T) {
	t.Parallel()
	f := setupWith(t, func(c *pipeline.Config) { c.IntakeQuota = store.IntakeQuota{MaxPending: 2} },
		func(c *compose.Config) { c.RepublishInterval = 50 * time.Millisecond; c.Wait = 200 * time.Millisecond })
	ctx := context.Background()
	require.NoError(t, f.admin.PausePhase(ctx, capsule.Reception))
	// One of bob's two places taken: the chain's first step fits, not
	// the other two.
	f.publishAs(t, "bob", capsuletest.New().Sealed(t))
	reply, err := f.composeAs(t, "bob", f.chainDoc(t, "c-full", "full intake"))
	require.NoError(t, err, "a full intake does not fail the request part-way")
	require.True(t, reply.Created)
	var states []string
	for _, s := range reply.Steps {
		states = append(states, s.State)
	}
	require.Equal(t, []string{compose.StepPending, compose.StepUnpublished, compose.StepUnpublished}, states)

	rec, err := compose.GetRun(ctx, f.st, "c-full", "bob", 1)
	require.NoError(t, err)
	m := compose.Manifest(rec)
	require.Contains(t, m.Publishing, "2 steps wait to be published; sagad publishes them itself")
	require.Contains(t, m.Publishing, "maximum messages per subject exceeded")
	require.Equal(t, compose.StepUnpublished, m.Steps[1].State)

	// Room appears: sagad publishes the rest itself, and the run ends.
	require.NoError(t, f.admin.ResumePhase(ctx, capsule.Reception))
	natstest.Eventually(t, 60*time.Second, 20*time.Millisecond, func() bool {
		rec, err = compose.GetRun(ctx, f.st, "c-full", "bob", 1)
		require.NoError(t, err)
		return rec.StateOf() != compose.StateRunning
	}, "the composition never ended")
	require.Equal(t, compose.StateCompleted, rec.StateOf())
	require.Empty(t, rec.Unpublished)
	require.Empty(t, compose.Manifest(rec).Publishing)
	for _, id := range rec.Steps {
		require.Equal(t, capsule.Completed, f.ended(t, id).State.Status)
	}
}
