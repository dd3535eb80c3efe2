package store

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
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
