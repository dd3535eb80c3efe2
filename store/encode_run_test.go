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
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/sagatest"
	"github.com/sagad/sagad/store"
)

// TestCheckpointWritesOnRealRuns runs capsules through a pipeline along
// its main paths (passed, a review loop, max cycles, a failed agent) and
// reads what their pooled messages wrote back from the streams: the last
// checkpoint write's bytes are the checkpoint's encoding/json and its
// headers (the expected revision, the ended capsule's time to live) are
// stored as sent, as are the outcome's and the outcome mark's.
func TestCheckpointWritesOnRealRuns(t *testing.T) {
	t.Parallel()
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
		want, err := cp.AppendJSON(nil)
		require.NoError(t, err)
		require.Equal(t, string(want), string(raw.Data))
		// Stored compactly (key, trace_id and the transitions' names made
		// again by the reader), read back as encoding/json's encoding is.
		require.NotContains(t, string(raw.Data), `"key":`)
		require.NotContains(t, string(raw.Data), `"trace_id":`)
		require.NotContains(t, string(raw.Data), `"history":[{`)
		full, err := json.Marshal(cp)
		require.NoError(t, err)
		var fromFull capsule.Checkpoint
		require.NoError(t, json.Unmarshal(full, &fromFull))
		require.Equal(t, &fromFull, cp)
		require.NotEmpty(t, raw.Header.Get(jetstream.ExpectedLastSubjSeqHeader))
		require.Equal(t, "1h0m0s", raw.Header.Get(jetstream.MsgTTLHeader), "the last write of an ended capsule")
		require.NotEqual(t, capsule.InProgress, cp.State.Status)
	}
	requireOutcomeHeaders(t, b, ids)
}

// requireOutcomeHeaders: each capsule's outcome message and its kept bytes,
// marked after the outcome was sent, carry their headers as stored.
func requireOutcomeHeaders(t *testing.T, b *sagatest.Bundle, ids []string) {
	t.Helper()
	ctx := context.Background()
	outcomes, err := b.JS.Stream(ctx, store.OutcomesStream)
	require.NoError(t, err)
	kept, err := b.JS.Stream(ctx, "KV_"+store.CapsulesBucket)
	require.NoError(t, err)
	for _, id := range ids {
		cp, _, err := b.Store.Checkpoints.Get(ctx, id)
		require.NoError(t, err)
		var m *jetstream.RawStreamMsg
		natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
			m, err = kept.GetLastMsgForSubject(ctx, "$KV."+store.CapsulesBucket+"."+id)
			return err == nil && m.Header.Get(store.HeaderOutcomeSent) == "true"
		}, "%s: the kept bytes never marked", id)
		require.Equal(t, "1h0m0s", m.Header.Get(jetstream.MsgTTLHeader))
		m, err = outcomes.GetLastMsgForSubject(ctx, store.OutcomeSubject(cp.State.Status))
		require.NoError(t, err)
		if m.Header.Get(store.HeaderKey) != id {
			continue // a later capsule's outcome of the same state
		}
		require.Equal(t, cp.CapsuleID, m.Header.Get(store.HeaderCapsuleID))
		require.Equal(t, cp.TraceID, m.Header.Get(store.HeaderTraceID))
		require.Equal(t, string(cp.State.Status), m.Header.Get(store.HeaderState))
		require.Equal(t, store.OutcomeMsgID(cp), m.Header.Get(jetstream.MsgIDHeader))
	}
}
