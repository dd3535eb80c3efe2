package pipeline_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// recordingStub keeps every request it is given, around the stub executor.
type recordingStub struct {
	mu   *sync.Mutex
	reqs *[]executors.Request
}

func (r recordingStub) Execute(ctx context.Context, req executors.Request) (executors.Result, error) {
	r.mu.Lock()
	*r.reqs = append(*r.reqs, req)
	r.mu.Unlock()
	return executors.Stub{}.Execute(ctx, req)
}

// TestRevisionNamesTheArtifactItRevises: the executor call of a revision
// cycle carries the review's findings and the artifact they are about (the
// previous cycle's); a first cycle carries neither.
func TestRevisionNamesTheArtifactItRevises(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var reqs []executors.Request
	f := setupWith(t, func(c *pipeline.Config) {
		c.Executors.RegisterExecutor("recording", recordingStub{mu: &mu, reqs: &reqs})
	})
	doc := f.own(t, capsuletest.New().Set("task.kind", "recording").
		Stub(map[string]any{"reviews": []any{"CHANGES_REQUESTED", "APPROVED"}}))
	f.publish(t, doc.Sealed(t))
	s := f.wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, reqs, 2)
	require.Equal(t, 1, reqs[0].Cycle)
	require.Empty(t, reqs[0].PriorArtifactRef)
	require.Empty(t, reqs[0].Findings)
	require.Equal(t, 2, reqs[1].Cycle)
	require.Equal(t, store.ArtifactRef(doc.ID(), 1), reqs[1].PriorArtifactRef)
	require.NotEmpty(t, reqs[1].Findings)
	call, err := executors.NewExecuteCall(reqs[1])
	require.NoError(t, err)
	require.Equal(t, store.ArtifactRef(doc.ID(), 1), call.PriorArtifactRef, "on the wire as prior_artifact_ref")
}
