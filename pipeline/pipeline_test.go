package pipeline_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/sagatest"
	"github.com/sagad/sagad/schemas"
	"github.com/sagad/sagad/store"
)

// fixture is one embedded server, one running pipeline and a client: the
// shared sagatest bundle under the names the pipeline's tests use.
type fixture struct {
	srv       *server.Server
	js        jetstream.JetStream
	gate      chan struct{} // releases one run of the "slow" executor
	client    *client.Client
	pipe      *pipeline.Pipeline
	cfg       pipeline.Config
	executed  *atomic.Int64
	workspace string
	// acceptedToken is the completion token of the "accepting" executor's
	// latest call.
	acceptedToken *atomic.Pointer[string]
	bundle        *sagatest.Bundle
}

type tlogWriter struct{ t testing.TB }

func (w tlogWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

func testConfig(t testing.TB, workspace string, reg *executors.Registry) pipeline.Config {
	return sagatest.Config(t, workspace, reg)
}

func setup(t *testing.T) *fixture { t.Helper(); return setupWith(t, nil) }

// setupWith is setup with a chance to change the pipeline's configuration.
func setupWith(t *testing.T, change func(*pipeline.Config)) *fixture {
	t.Helper()
	b := sagatest.Run(t, change)
	return &fixture{
		srv: b.Server, js: b.JS, gate: b.Gate, client: b.Client, pipe: b.Pipeline, cfg: b.Config,
		executed: b.Executed, workspace: b.Workspace, acceptedToken: b.AcceptedToken, bundle: b,
	}
}

func (f *fixture) start(t *testing.T, cfg pipeline.Config) *pipeline.Pipeline {
	t.Helper()
	return f.bundle.Start(t, cfg)
}

func (f *fixture) publish(t *testing.T, raw []byte) { t.Helper(); f.bundle.Publish(t, raw) }

// wait polls until the capsule has left in_progress and waiting.
func (f *fixture) wait(t *testing.T, id string) client.Status {
	t.Helper()
	return f.bundle.Wait(t, id)
}

// own gives the capsule a target and lock of its own, so capsules of one test
// do not contend for locks.
func (f *fixture) own(t *testing.T, d capsuletest.Doc) capsuletest.Doc {
	t.Helper()
	return f.bundle.Own(t, d)
}

func outcomes(h []client.HistoryEntry) []string { return sagatest.Outcomes(h) }

func TestValidCapsuleCompletes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	doc := capsuletest.New()
	f.publish(t, doc.Sealed(t))
	s := f.wait(t, doc.ID())

	require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)
	require.Equal(t, 6, s.Phase)
	require.Equal(t, 1, s.CyclesUsed)
	require.Empty(t, s.HaltReason)
	require.Equal(t, 100, s.Progress)
	require.Equal(t, []string{
		"RECEPTION/passed", "REALITY_ANCHOR/passed", "PLANNING/passed", "AUTOMATED_GATES/passed",
		"EXECUTION/passed", "REVIEW/passed", "HANDOFF/completed",
	}, outcomes(s.History))
	require.Equal(t, int64(1), f.executed.Load())
	require.Equal(t, []string{"artifact:" + doc.ID() + "/1"}, s.ArtifactRefs)

	// Everything sagad wrote validates against its schema.
	cp, err := f.client.Checkpoint(context.Background(), doc.ID())
	require.NoError(t, err)
	require.NoError(t, schemas.ValidateValue(schemas.Checkpoint, cp))
	// A small artifact is one entry of the records bucket, not an object.
	records, err := f.js.KeyValue(context.Background(), store.ArtifactRecordsBucket)
	require.NoError(t, err)
	e, err := records.Get(context.Background(), doc.ID()+"/1")
	require.NoError(t, err)
	require.NoError(t, schemas.Validate(schemas.Artifact, e.Value()))
	objs, err := f.js.ObjectStore(context.Background(), store.ArtifactsBucket)
	require.NoError(t, err)
	_, err = objs.GetInfo(context.Background(), doc.ID()+"/1")
	require.ErrorIs(t, err, jetstream.ErrObjectNotFound)

	events, err := f.client.History(context.Background(), doc.ID())
	require.NoError(t, err)
	kinds := map[capsule.EventKind]int{}
	for _, e := range events {
		kinds[e.Kind]++
	}
	require.Equal(t, 1, kinds[capsule.EventReceived])
	require.Equal(t, 7, kinds[capsule.EventPhaseCompleted])
	require.Equal(t, 6, kinds[capsule.EventPhaseStarted])
	require.Equal(t, 1, kinds[capsule.EventCompleted])

	// The completed capsule is emitted once on the outcome stream (published
	// once its end is recorded).
	requireOutcomes(t, f, 1)
	msg, err := f.js.Stream(context.Background(), store.OutcomesStream)
	require.NoError(t, err)
	got, err := msg.GetLastMsgForSubject(context.Background(), store.OutcomeSubject(capsule.Completed))
	require.NoError(t, err)
	require.Equal(t, doc.ID(), got.Header.Get(store.HeaderCapsuleID))
	var back capsule.Capsule
	require.NoError(t, json.Unmarshal(got.Data, &back))
	require.Equal(t, doc.ID(), back.CapsuleID)
}
