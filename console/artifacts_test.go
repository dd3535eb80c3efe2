package console

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/store"
)

// TestConsoleArtifactForms: the console shows an artifact whatever its
// stored form — a record of SAGA_ARTIFACT_RECORDS, a large one's object,
// and a small object an older sagad wrote — none of them in its own
// process's copies (another sagad wrote them).
func TestConsoleArtifactForms(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(f.nc)
	require.NoError(t, err)
	other, err := store.Open(ctx, js)
	require.NoError(t, err)
	artifact := func(cycle, size int) capsule.Artifact {
		return capsule.Artifact{
			SchemaVersion: "1.0", CapsuleID: capsuletest.NewID(), ProducerAgentID: "agent", Cycle: cycle,
			MediaType: "application/json", CreatedAt: time.Now().UTC(), Content: []byte(`"` + strings.Repeat("x", size) + `"`),
		}
	}
	small, large, old := artifact(1, 100), artifact(2, 300<<10), artifact(3, 100)
	smallRef, err := other.Artifacts.Put(ctx, small)
	require.NoError(t, err)
	largeRef, err := other.Artifacts.Put(ctx, large)
	require.NoError(t, err)
	old.Ref = store.ArtifactRef(old.CapsuleID, old.Cycle)
	b, err := json.Marshal(old)
	require.NoError(t, err)
	objs, err := js.ObjectStore(ctx, store.ArtifactsBucket)
	require.NoError(t, err)
	_, err = objs.PutBytes(ctx, strings.TrimPrefix(old.Ref, "artifact:"), b)
	require.NoError(t, err)

	records, err := js.KeyValue(ctx, store.ArtifactRecordsBucket)
	require.NoError(t, err)
	_, err = records.Get(ctx, strings.TrimPrefix(smallRef, "artifact:"))
	require.NoError(t, err, "the small one is a record")
	_, err = objs.GetInfo(ctx, strings.TrimPrefix(largeRef, "artifact:"))
	require.NoError(t, err, "the large one is an object")

	for _, want := range []capsule.Artifact{small, large, old} {
		var got capsule.Artifact
		ref := store.ArtifactRef(want.CapsuleID, want.Cycle)
		require.Equal(t, http.StatusOK, f.get(t, "/ui/api/artifact?ref="+url.QueryEscape(ref), &got), ref)
		require.Equal(t, want.CapsuleID, got.CapsuleID)
		require.Equal(t, string(want.Content), string(got.Content))
	}
}
