package adminsvc

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/costs"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
)

func init() {
	schemaFor[VerbCost] = "cost-request"
	replySchema[VerbCost] = "cost-reply"
}

// TestCostEndpoint: saga.admin.cost sums the checkpoints' spend per
// grouping, a halted capsule's as failed; kind comes from the kept bytes;
// composition answers a note; the models without a price are named; a
// malformed request is bad_request.
func TestCostEndpoint(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)
	ctx := context.Background()
	f := &fixture{nc: nc, workspace: capsuletest.Workspace(t)}
	p, err := pipeline.New(ctx, js, pipeline.Config{
		Logger: testLogger(t), Workspace: f.workspace, Workers: 4,
		AckWait: 2 * time.Second, Heartbeat: 300 * time.Millisecond, RetryDelay: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	svc, err := Start(nc, p.Admin(), Config{Logger: testLogger(t), Costs: WithUnpriced(StoreCosts(p.Store()), []string{"llama3"})})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	f.client = NewClient(nc, ClientConfig{Timeout: 10 * time.Second})
	f.pipeline, err = client.NewClient(ctx, js)
	require.NoError(t, err)

	ok := capsuletest.New().Stub(map[string]any{"usage": map[string]any{"tokens": 500, "dollars": 0.03}})
	bad := capsuletest.New().Stub(map[string]any{"fail": "worker out of disk"})
	f.publish(t, ok)
	f.publish(t, bad)
	f.waitState(t, ok.ID(), capsule.Completed)
	f.waitState(t, bad.ID(), capsule.Halted)

	var r CostReply
	require.NoError(t, json.Unmarshal(f.do(t, VerbCost, CostRequest{By: costs.ByKind}, ""), &r))
	require.Len(t, r.Groups, 1)
	g := r.Groups[0]
	require.Equal(t, "stub", g.Key, "the kind is the capsule's task.kind")
	require.Equal(t, 2, g.Capsules)
	require.Equal(t, 1, g.FailedCapsules)
	require.GreaterOrEqual(t, g.Tokens, int64(500))
	require.Equal(t, r.Total.Tokens, g.Tokens)
	require.NotEmpty(t, r.Days)
	require.Equal(t, []string{"llama3"}, r.Unpriced, "the models without a price are named")

	require.NoError(t, json.Unmarshal(f.do(t, VerbCost, []byte(``), ""), &r))
	require.Equal(t, costs.ByWave, r.By, "wave is the default")
	require.Equal(t, []string{costs.None}, keys(r.Groups))

	future := time.Now().Add(time.Hour)
	require.NoError(t, json.Unmarshal(f.do(t, VerbCost, CostRequest{By: costs.ByDay, Since: &future}, ""), &r))
	require.Empty(t, r.Groups)
	require.Zero(t, r.Total.Capsules)

	require.NoError(t, json.Unmarshal(f.do(t, VerbCost, CostRequest{By: costs.ByComposition}, ""), &r))
	require.Equal(t, []string{costs.None}, keys(r.Groups), "capsules of no composition")
	require.Empty(t, r.Note)

	got, err := f.client.Cost(ctx, CostRequest{By: costs.ByProducer})
	require.NoError(t, err)
	require.Equal(t, 2, got.Total.Capsules)

	f.do(t, VerbCost, []byte(`{"by":"capsule"}`), CodeBadRequest)
	f.do(t, VerbCost, []byte(`{"limit":501}`), CodeBadRequest)
	f.do(t, VerbCost, []byte(`{"since":"yesterday"}`), CodeBadRequest)
	f.do(t, VerbCost, []byte(`{"other":1}`), CodeBadRequest)
}

func keys(gs []costs.Group) []string {
	out := []string{}
	for _, g := range gs {
		out = append(out, g.Key)
	}
	return out
}
