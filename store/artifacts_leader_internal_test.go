package store

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/internal/natstest"
)

// TestArtifactRecordMissConfirmedByLeader: a direct get may be answered by
// a replica that has not stored another sagad's put yet (R3). Here the
// reader asks an empty bucket, the worst such replica: the record is still
// read, and found to exist, from the stream's leader; a record nobody wrote
// is still gone.
func TestArtifactRecordMissConfirmedByLeader(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	st, err := Ensure(ctx, js, Topology{})
	require.NoError(t, err)
	a := capsule.Artifact{
		SchemaVersion: "1.0", CapsuleID: "5a6a0000-0000-4000-8000-000000000001", ProducerAgentID: "stub", Cycle: 1,
		MediaType: "application/json", SHA256: "x", Size: 2, CreatedAt: time.Now().UTC(), Content: json.RawMessage(`{}`),
	}
	ref, err := st.Artifacts.Put(ctx, a)
	require.NoError(t, err)

	lagging, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "LAGGING"})
	require.NoError(t, err)
	behind := newArtifactStore(st.Artifacts.os, st.Artifacts.records, js)
	behind.recordReader = jspub.NewKVReader(jspub.Conn(js), lagging, nil, true)

	got, err := behind.Get(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, ref, got.Ref)
	ok, err := behind.exists(ctx, ref)
	require.NoError(t, err)
	require.True(t, ok)

	_, err = behind.Get(ctx, ArtifactRef(a.CapsuleID, 2))
	require.True(t, errors.Is(err, capsule.ErrArtifactGone), "%v", err)
	ok, err = behind.exists(ctx, ArtifactRef(a.CapsuleID, 2))
	require.NoError(t, err)
	require.False(t, ok)
}

// TestArtifactRecordCorrupt: a record that does not decode, or names
// another artifact, is a value sagad did not write (the phase reading it
// halts state_corrupt:<bucket>), not an error to try again.
func TestArtifactRecordCorrupt(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	st, err := Ensure(ctx, js, Topology{})
	require.NoError(t, err)
	const id = "5a6a0000-0000-4000-8000-000000000002"
	other, err := json.Marshal(map[string]any{"ref": ArtifactRef(id, 9)})
	require.NoError(t, err)
	for cycle, b := range map[int][]byte{1: []byte("not json"), 2: other} {
		ref := ArtifactRef(id, cycle)
		_, err := st.Artifacts.records.Put(ctx, strings.TrimPrefix(ref, "artifact:"), b)
		require.NoError(t, err)
		_, err = st.Artifacts.Get(ctx, ref)
		e, ok := corrupt.As(err)
		require.True(t, ok, "%v", err)
		require.Equal(t, ArtifactRecordsBucket, e.Bucket)
	}
}
