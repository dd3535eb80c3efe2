package workernode_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// nodeArtifact is what the Node worker's executor writes, in part.
type nodeArtifact struct {
	AddressedFindings []string `json:"addressed_findings"`
	OperatorAnswer    string   `json:"operator_answer"`
	Revised           *struct {
		Ref  string `json:"ref"`
		Size int64  `json:"size"`
		Via  string `json:"via"`
	} `json:"revised"`
}

// TestNodeWorkerRevision is items 1–3 of a revision end to end with the
// Node worker: the reviewer asks for changes, the operator revises, and the
// next call carries the reviewer's finding then the operator's, the
// rationale as operator_answer, and the prior artifact — inline when small,
// by reference through saga.artifacts.get when it is 2 MiB.
func TestNodeWorkerRevision(t *testing.T) {
	node, npm := requireNode(t)
	dir := install(t, npm)
	for name, tc := range map[string]struct {
		id  string
		pad int
		via string
	}{
		"inline":       {"de300000-0000-4000-8000-000000000201", 0, "inline"},
		"by reference": {"de300000-0000-4000-8000-000000000202", 2 << 20, "reference"},
	} {
		t.Run(name, func(t *testing.T) {
			// A 2 MiB artifact is a 2 MiB reply: more than the default
			// max payload.
			s := natstest.RunServerWith(t, func(o *server.Options) { o.MaxPayload = 8 << 20 })
			startWorker(t, node, dir, s.ClientURL(), "--agent-id", "node-worker-e2e")
			revision(t, s, tc.id, tc.pad, tc.via)
		})
	}
}

func revision(t *testing.T, s *server.Server, id string, pad int, via string) {
	nc, js := natstest.Connect(t, s)
	b, err := os.ReadFile("../sagad.json")
	require.NoError(t, err)
	var cfg executors.Config
	require.NoError(t, json.Unmarshal(b, &cfg))
	reg, err := cfg.Build(nc)
	require.NoError(t, err)
	workspace, err := filepath.Abs("../..")
	require.NoError(t, err)
	ctx := context.Background()
	p, err := pipeline.New(ctx, js, pipeline.Config{
		Logger:    slog.New(slog.NewTextHandler(tlog{t, ""}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Workspace: workspace, Workers: 2, AckWait: 2 * time.Second, Heartbeat: 300 * time.Millisecond,
		RetryDelay: 50 * time.Millisecond, Executors: reg,
	})
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	cl, err := client.NewClient(ctx, js)
	require.NoError(t, err)
	a, err := admin.Open(ctx, js)
	require.NoError(t, err)

	raw, err := os.ReadFile("../worker/demo-capsule.json")
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw, &doc))
	doc["capsule_id"] = id
	doc["review"].(map[string]any)["operator_gate"] = "all"
	doc["budget"] = map[string]any{"tokens": 10_000_000, "dollars": 100}
	doc["metadata"] = map[string]any{"worker": map[string]any{"changes_first": true, "pad_bytes": pad}}
	b, err = json.Marshal(doc)
	require.NoError(t, err)
	sealed, err := capsule.Seal(b)
	require.NoError(t, err)
	_, err = cl.Publish(ctx, sealed, "")
	require.NoError(t, err)

	wait := func(want capsule.State) {
		var st client.Status
		natstest.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool {
			st, err = cl.Status(ctx, id)
			return err == nil && (st.State == want || st.State.Terminal())
		}, "capsule %s never reached %s", id, want)
		require.Equal(t, want, st.State, "halt: %s", st.HaltReason)
	}
	wait(capsule.WaitingForOperator)
	_, err = a.Decide(ctx, id, admin.DecisionRevise, "the licence is MIT", "carol")
	require.NoError(t, err)
	wait(capsule.WaitingForOperator)

	st, err := store.Open(ctx, js)
	require.NoError(t, err)
	b, err = st.Artifacts.Bytes(ctx, store.ArtifactRef(id, 2))
	require.NoError(t, err)
	var rec capsule.Artifact
	require.NoError(t, json.Unmarshal(b, &rec))
	var art nodeArtifact
	require.NoError(t, json.Unmarshal(rec.Content, &art))
	require.Equal(t, []string{
		"demo: name the licence (metadata.worker.changes_first)",
		"operator: operator revision: the licence is MIT",
	}, art.AddressedFindings)
	require.Equal(t, "the licence is MIT", art.OperatorAnswer)
	require.NotNil(t, art.Revised)
	require.Equal(t, "artifact:"+id+"/1", art.Revised.Ref)
	require.Equal(t, via, art.Revised.Via)
	require.Greater(t, art.Revised.Size, int64(pad))
	require.False(t, strings.Contains(string(rec.Content), `"revised":null`))
}
