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

// TestArtifactPutReadsBackWithTheObjectStoreClient: artifacts stored as
// objects are written in the object store's format by hand; the nats.go
// object store client must read them back intact (its digest check
// included), small and multi-chunk. (A store with no records bucket writes
// every record as an object, as over an older sagad's topology.)
func TestArtifactPutReadsBackWithTheObjectStoreClient(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	st, err := ensureTopology(ctx, js, Topology{}.withDefaults())
	require.NoError(t, err)
	w := newArtifactStore(st.artifacts, nil, js)
	for _, size := range []int{10, 3 * maxChunk} {
		a := capsule.Artifact{
			SchemaVersion: "1.0", CapsuleID: "01J00000000000000000000000", ProducerAgentID: "agent", Cycle: size,
			MediaType: "application/json", Content: []byte(`"` + strings.Repeat("x", size) + `"`), CreatedAt: time.Now().UTC(),
		}
		ref, err := w.Put(ctx, a)
		require.NoError(t, err)
		// A fresh store has no in-process copy: this reads the object store.
		got, err := newArtifactStore(st.artifacts, st.artifactRecords, js).Get(ctx, ref) // and a record's reader finds it
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
	s := newArtifactStore(nil, nil, nil)
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

// TestArtifactsBoundedInBytes: large artifacts are kept up to recentBytes of
// content, the oldest dropped first; the newest stays even when it alone is
// larger.
func TestArtifactsBoundedInBytes(t *testing.T) {
	t.Parallel()
	s := newArtifactStore(nil, nil, nil)
	big := func(i, size int) capsule.Artifact {
		return capsule.Artifact{Ref: ArtifactRef("c", i), Content: make([]byte, size)}
	}
	const size = 4 << 20
	n := recentBytes/size + 5
	for i := range n {
		s.remember(big(i, size))
		require.LessOrEqual(t, s.bytes, recentBytes)
	}
	require.Len(t, s.recent, recentBytes/size)
	_, ok := s.recent[ArtifactRef("c", 4)]
	require.False(t, ok, "the oldest are dropped")
	_, ok = s.recent[ArtifactRef("c", n-1)]
	require.True(t, ok, "the newest is kept")

	s.remember(big(n, recentBytes+1))
	require.Len(t, s.recent, 1)
	require.Equal(t, recentBytes+1, s.bytes)
	s.remember(big(n+1, 10))
	require.Len(t, s.recent, 1, "the huge one goes first")
	require.Equal(t, 10, s.bytes)
}
