package store

import (
	"context"
	"strings"
	"testing"
	"time"

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
	st, err := ensureTopology(ctx, js, Topology{}.withDefaults())
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

// TestArtifactsKeepTheNewest: the in-process copies REVIEW reads are the
// last recentArtifacts put, whatever came before; a ref put again keeps its
// place and is not counted twice.
func TestArtifactsKeepTheNewest(t *testing.T) {
	t.Parallel()
	s := newArtifactStore(nil, nil)
	put := func(i int) {
		s.remember(capsule.Artifact{Ref: ArtifactRef("c", i), Cycle: i})
	}
	const extra = 300
	for i := range recentArtifacts + extra {
		put(i)
		if i == 10 {
			put(10) // a redelivered put: same ref, same slot
		}
	}
	require.Len(t, s.recent, recentArtifacts)
	for i := range recentArtifacts + extra {
		_, ok := s.recent[ArtifactRef("c", i)]
		require.Equal(t, i >= extra, ok, "artifact %d kept", i)
	}
}
