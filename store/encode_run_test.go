package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/sagatest"
	"github.com/sagad/sagad/store"
)

// TestCheckpointWritesOnRealRuns runs capsules through a pipeline along
// its main paths (passed, a review loop, max cycles, a failed agent) with
// every checkpoint write held to a full encoding of the checkpoint written
// (the kept history's bytes against encoding every transition again), and
// reads the last write of each back from the bucket's stream: the stored
// bytes are the checkpoint's encoding/json, and the write's headers (the
// expected revision, the ended capsule's time to live) are stored as sent.
func TestCheckpointWritesOnRealRuns(t *testing.T) {
	t.Parallel()
	checked := store.CheckEncodings()
	before := checked()
	b := sagatest.Run(t, func(c *pipeline.Config) { c.Retention = time.Hour })
	scripts := []map[string]any{
		nil,
		{"reviews": []any{"CHANGES_REQUESTED", "APPROVED"}},
		{"reviews": []any{"CHANGES_REQUESTED", "CHANGES_REQUESTED", "CHANGES_REQUESTED"}},
		{"fail": "model refused"},
	}
	var ids []string
	for _, s := range scripts {
		d := capsuletest.New()
		if s != nil {
			d = d.Stub(s)
		}
		d = b.Own(t, d)
		b.Publish(t, d.Sealed(t))
		ids = append(ids, d.ID())
	}
	ctx := context.Background()
	stream, err := b.JS.Stream(ctx, "KV_"+store.CheckpointsBucket)
	require.NoError(t, err)
	for _, id := range ids {
		b.Wait(t, id)
		cp, rev, err := b.Store.Checkpoints.Get(ctx, id)
		require.NoError(t, err)
		require.Greater(t, len(cp.History), 3, "%s: a run of several transitions", id)
		raw, err := stream.GetMsg(ctx, rev)
		require.NoError(t, err)
		want, err := json.Marshal(cp)
		require.NoError(t, err)
		require.Equal(t, string(want), string(raw.Data))
		require.NotEmpty(t, raw.Header.Get(jetstream.ExpectedLastSubjSeqHeader))
		require.Equal(t, "1h0m0s", raw.Header.Get(jetstream.MsgTTLHeader), "the last write of an ended capsule")
		require.NotEqual(t, capsule.InProgress, cp.State.Status)
	}
	require.Greater(t, checked()-before, int64(4*5), "every write was checked")
}
