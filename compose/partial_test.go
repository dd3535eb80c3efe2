package compose_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/internal/natstest"
)

// TestComposeDeadlinePartWay: a compose request whose deadline runs out
// while it publishes the steps (seen with 256 steps under load) used to
// return without recording the rest, leaving the run half-published
// until the same document was sent again. Now the reply names the steps
// that wait, the record says why, and sagad publishes them itself.
func TestComposeDeadlinePartWay(t *testing.T) {
	t.Parallel()
	// The request's deadline runs out before it publishes step 1. The
	// republisher waits an hour: the run's first step ending (the
	// runner) publishes the rest, so the record is seen between.
	f := setup(t, func(c *compose.Config) {
		c.Timeout, c.Wait, c.RepublishInterval = 5*time.Second, 100*time.Millisecond, time.Hour
		compose.SetPublishHook(c, func(ctx context.Context, i int) {
			if i == 1 {
				<-ctx.Done()
			}
		})
	})
	ctx := context.Background()
	require.NoError(t, f.admin.PausePhase(ctx, capsule.Reception))
	reply, err := f.composeAs(t, "bob", f.chainDoc(t, "c-late", "late intake"))
	require.NoError(t, err, "a deadline part-way does not fail the request")
	require.True(t, reply.Created)
	var states []string
	for _, s := range reply.Steps {
		states = append(states, s.State)
	}
	require.Equal(t, []string{compose.StepPending, compose.StepUnpublished, compose.StepUnpublished}, states)

	rec, err := compose.GetRun(ctx, f.st, "c-late", "bob", 1)
	require.NoError(t, err)
	require.Equal(t, []int{1, 2}, rec.Unpublished)
	require.Contains(t, rec.PublishError, "context deadline exceeded")
	require.True(t, compose.EffectsOf(rec).Publish)
	m := compose.Manifest(rec)
	require.Contains(t, m.Publishing, "2 steps wait to be published; sagad publishes them itself")
	require.Equal(t, compose.StepUnpublished, m.Steps[1].State)

	require.NoError(t, f.admin.ResumePhase(ctx, capsule.Reception))
	rec = f.awaitRunEnd(t, "c-late", "bob")
	require.Equal(t, compose.StateCompleted, rec.StateOf())
	require.Empty(t, rec.Unpublished)
	require.Empty(t, rec.PublishError)
	for _, id := range rec.Steps {
		require.Equal(t, capsule.Completed, f.ended(t, id).State.Status)
	}
}

// TestComposeCrashAfterRecord: a sagad that stops between recording a
// run and publishing its steps leaves a record that claims them for its
// request (every step unpublished). Once the request's deadline is past,
// the republisher takes them over and the run completes.
func TestComposeCrashAfterRecord(t *testing.T) {
	t.Parallel()
	// The republisher's first pass may come before the record is
	// written: its passes without a known backlog (once a minute) find it.
	f := setup(t, func(c *compose.Config) {
		c.Timeout, c.RepublishInterval = time.Second, 50*time.Millisecond
		compose.SetOrphanScan(c, 200*time.Millisecond)
	})
	ctx := context.Background()
	data := f.chainDoc(t, "c-crash", "crashed request")
	doc, err := compose.Parse(data)
	require.NoError(t, err)
	ids, err := compose.NewStepIDs(len(doc.Steps))
	require.NoError(t, err)
	_, digests, err := doc.Build(ids, 1)
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	digest := hex.EncodeToString(sum[:])
	// What assign wrote before the crash: the document, then the run
	// made a minute ago, its steps claimed by a request long past its
	// deadline and none published.
	require.NoError(t, f.st.Compositions.PutDoc(ctx, "c-crash", "bob", digest, data))
	require.NoError(t, compose.CreateRecord(ctx, f.st, &compose.Record{
		CompositionID: "c-crash", Producer: "bob", Digest: digest, Steps: ids, StepDigests: digests,
		CreatedAt: time.Now().UTC().Add(-time.Minute), Unpublished: []int{0, 1, 2}, PublishError: compose.PublishingNow,
	}))

	rec := f.awaitRunEnd(t, "c-crash", "bob")
	require.Equal(t, compose.StateCompleted, rec.StateOf())
	require.Empty(t, rec.Unpublished)
	require.Empty(t, compose.Manifest(rec).Publishing)
	for _, id := range ids {
		require.Equal(t, capsule.Completed, f.ended(t, id).State.Status)
	}
}

// awaitRunEnd waits for run 1 of producer's composition id to end.
func (f *fixture) awaitRunEnd(t *testing.T, id, producer string) *compose.Record {
	t.Helper()
	var rec *compose.Record
	natstest.Eventually(t, 60*time.Second, 20*time.Millisecond, func() bool {
		got, err := compose.GetRun(context.Background(), f.st, id, producer, 1)
		require.NoError(t, err)
		rec = got
		return got.StateOf() != compose.StateRunning
	}, "composition %s never ended", id)
	return rec
}
