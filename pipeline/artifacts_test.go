package pipeline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/natstest"
)

// TestArtifactPutReadsBackWithTheObjectStoreClient: artifacts are written in
// the object store's format by hand; the nats.go object store client must
// read them back intact (its digest check included), small and multi-chunk.
func TestArtifactPutReadsBackWithTheObjectStoreClient(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	st, err := ensureTopology(ctx, js, Config{}.withDefaults())
	require.NoError(t, err)
	w := newArtifactStore(st.artifacts, js)
	for _, size := range []int{10, 3 * maxChunk} {
		a := capsule.Artifact{
			SchemaVersion: "1.0", CapsuleID: "01J00000000000000000000000", ProducerAgentID: "agent", Cycle: size,
			MediaType: "application/json", Content: []byte(`"` + strings.Repeat("x", size) + `"`), CreatedAt: time.Now().UTC(),
		}
		ref, err := w.Put(ctx, a)
		require.NoError(t, err)
		// A fresh store has no in-process copy: this reads the object store.
		got, err := newArtifactStore(st.artifacts, js).Get(ctx, ref)
		require.NoError(t, err)
		require.JSONEq(t, string(a.Content), string(got.Content))
		info, err := st.artifacts.GetInfo(ctx, strings.TrimPrefix(ref, "artifact:"))
		require.NoError(t, err)
		require.Equal(t, size > maxChunk, info.Chunks > 1, "chunks: %d", info.Chunks)
		_, found, err := w.Lookup(ctx, a.CapsuleID, a.Cycle)
		require.NoError(t, err)
		require.True(t, found)
	}
}

func TestParsePubAck(t *testing.T) {
	t.Parallel()
	seq, err := parsePubAck([]byte(`{"stream":"KV_SAGA_CHECKPOINTS","seq":1234}`))
	require.NoError(t, err)
	require.EqualValues(t, 1234, seq)
	seq, err = parsePubAck([]byte(`{"stream":"S","domain":"d","seq":7,"duplicate":true}`))
	require.NoError(t, err)
	require.EqualValues(t, 7, seq)
	_, err = parsePubAck([]byte(`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"S","seq":0}`))
	var apiErr *jetstream.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, jetstream.JSErrCodeStreamWrongLastSequence, apiErr.ErrorCode)
	_, err = parsePubAck([]byte(`not json`))
	require.Error(t, err)
}
