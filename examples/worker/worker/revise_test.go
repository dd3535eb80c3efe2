package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/examples/worker/worker"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// demoVariant is the demo capsule with changes (dotted paths), resealed.
func demoVariant(t *testing.T, id string, set map[string]any) []byte {
	t.Helper()
	raw, err := os.ReadFile("../demo-capsule.json")
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw, &doc))
	doc["capsule_id"] = id
	for path, v := range set {
		m := doc
		parts := splitPath(path)
		for _, p := range parts[:len(parts)-1] {
			next, ok := m[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[p] = next
			}
			m = next
		}
		m[parts[len(parts)-1]] = v
	}
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	sealed, err := capsule.Seal(b)
	require.NoError(t, err)
	return sealed
}

func splitPath(p string) []string {
	var out []string
	start := 0
	for i := range len(p) {
		if p[i] == '.' {
			out = append(out, p[start:i])
			start = i + 1
		}
	}
	return append(out, p[start:])
}

// runDemo starts sagad's pipeline as examples/sagad.json configures it, with
// the demo worker beside it, and returns a client and the admin.
func runDemo(t *testing.T) (*client.Client, *admin.Admin, jetstream.JetStream) {
	t.Helper()
	// Replies of 2 MiB (the artifact itself) need a larger max payload than
	// the default 1 MiB; the prior artifact still goes by reference, past
	// --inline-artifact-bytes.
	s := natstest.RunServerWith(t, func(o *server.Options) { o.MaxPayload = 8 << 20 })
	workerConn, _ := natstest.Connect(t, s)
	serve(t, workerConn, worker.Config{AgentID: "demo-worker-e2e"})
	nc, js := natstest.Connect(t, s)
	b, err := os.ReadFile("../../sagad.json")
	require.NoError(t, err)
	var cfg executors.Config
	require.NoError(t, json.Unmarshal(b, &cfg))
	reg, err := cfg.Build(nc)
	require.NoError(t, err)
	workspace, err := filepath.Abs("../../..")
	require.NoError(t, err)
	ctx := context.Background()
	p, err := pipeline.New(ctx, js, pipeline.Config{
		Logger: logger(t, slog.LevelWarn), Workspace: workspace, Workers: 2,
		AckWait: 2 * time.Second, Heartbeat: 300 * time.Millisecond, RetryDelay: 50 * time.Millisecond,
		Executors: reg,
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
	return cl, a, js
}

func waitState(t *testing.T, cl *client.Client, id string, want capsule.State) client.Status {
	t.Helper()
	var st client.Status
	natstest.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool {
		var err error
		st, err = cl.Status(context.Background(), id)
		return err == nil && (st.State == want || st.State.Terminal())
	}, "capsule %s never reached %s", id, want)
	require.Equal(t, want, st.State, "halt: %s", st.HaltReason)
	return st
}

func demoArtifact(t *testing.T, js jetstream.JetStream, id string, cycle int) worker.Artifact {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, js)
	require.NoError(t, err)
	b, err := st.Artifacts.Bytes(ctx, store.ArtifactRef(id, cycle))
	require.NoError(t, err)
	var rec capsule.Artifact
	require.NoError(t, json.Unmarshal(b, &rec))
	var a worker.Artifact
	require.NoError(t, json.Unmarshal(rec.Content, &a))
	return a
}

// TestDemoRevision is items 1–3 of a revision end to end with the demo
// worker over NATS: the reviewer asks for changes, the operator revises with
// a rationale, and the next call carries the reviewer's finding then the
// operator's, the rationale as operator_answer, and the prior artifact —
// inline when small, by reference through saga.artifacts.get when it is
// 2 MiB (too large for a NATS message; the reviewer fetches it that way too).
func TestDemoRevision(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		id  string
		pad int
		via string
	}{
		"inline":       {"de300000-0000-4000-8000-000000000101", 0, "inline"},
		"by reference": {"de300000-0000-4000-8000-000000000102", 2 << 20, "reference"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cl, a, js := runDemo(t)
			ctx := context.Background()
			raw := demoVariant(t, tc.id, map[string]any{
				"review.operator_gate": "all",
				"budget.tokens":        10_000_000, "budget.dollars": 100,
				"metadata.worker": map[string]any{"changes_first": true, "pad_bytes": tc.pad},
			})
			_, err := cl.Publish(ctx, raw, "")
			require.NoError(t, err)
			waitState(t, cl, tc.id, capsule.WaitingForOperator)
			_, err = a.Decide(ctx, tc.id, admin.DecisionRevise, "the licence is MIT", "carol")
			require.NoError(t, err)
			waitState(t, cl, tc.id, capsule.WaitingForOperator)

			first, second := demoArtifact(t, js, tc.id, 1), demoArtifact(t, js, tc.id, 2)
			require.Nil(t, first.Revised)
			require.Equal(t, []string{
				"demo: name the licence (metadata.worker.changes_first)",
				"operator: operator revision: the licence is MIT",
			}, second.AddressedFindings)
			require.Equal(t, "the licence is MIT", second.OperatorAnswer)
			require.NotNil(t, second.Revised)
			require.Equal(t, "artifact:"+tc.id+"/1", second.Revised.Ref)
			require.Equal(t, tc.via, second.Revised.Via)
			require.Greater(t, second.Revised.Size, int64(tc.pad))
		})
	}
}
