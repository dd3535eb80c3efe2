package adminsvc

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
)

func init() {
	schemaFor[VerbChain] = "chain-request"
	replySchema[VerbChain] = "chain-reply"
}

// TestChainEndpoint: saga.admin.chain shows a composed chain's steps with
// their states, per producer; an unknown chain or producer is not_found,
// a malformed request bad_request.
func TestChainEndpoint(t *testing.T) {
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
	svc, err := Start(nc, p.Admin(), Config{Logger: testLogger(t), Chains: StoreChains(p.Store())})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	composer, err := compose.Start(nc, p.Store(), compose.Config{Logger: testLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, composer.Stop()) })

	step := capsuletest.New().Delete("capsule_id")
	doc, err := json.Marshal(map[string]any{"chain_id": "c-1", "steps": []any{map[string]any(step)}})
	require.NoError(t, err)
	msg, err := nc.Request(compose.Subject+".alice", doc, 10*time.Second)
	require.NoError(t, err)
	r, err := compose.DecodeReply(msg)
	require.NoError(t, err)

	var ch client.Chain
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		require.NoError(t, json.Unmarshal(f.do(t, VerbChain, ChainRequest{ChainID: "c-1"}, ""), &ch))
		return ch.Steps[0].State == capsule.Completed
	}, "the step completes")
	require.Equal(t, "alice", ch.Producer)
	require.Equal(t, r.Steps[0].CapsuleID, ch.Steps[0].CapsuleID)
	require.Equal(t, "stub", ch.Steps[0].Kind)

	alice, bob := "alice", "bob"
	f.do(t, VerbChain, ChainRequest{ChainID: "c-1", Producer: &alice}, "")
	f.do(t, VerbChain, ChainRequest{ChainID: "c-1", Producer: &bob}, CodeNotFound)
	f.do(t, VerbChain, ChainRequest{ChainID: "c-2"}, CodeNotFound)
	f.do(t, VerbChain, []byte(`{"chain_id":"a b"}`), CodeBadRequest)
	f.do(t, VerbChain, []byte(`{"chain_id":"c-1","producer":"x.y"}`), CodeBadRequest)
	f.do(t, VerbChain, []byte(`{"chain_id":"c-1","other":1}`), CodeBadRequest)
}
