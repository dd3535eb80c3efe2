package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/sagatest"
)

// questioner streams a little, asks one question on a reply subject of its
// own connection and finishes with the stub's artifact once answered.
type questioner struct {
	nc      *nats.Conn
	answers chan string
}

func (q *questioner) Execute(ctx context.Context, req executors.Request) (executors.Result, error) {
	obs := executors.ObserverFrom(ctx)
	start := time.Now()
	obs.Progress(executors.CallProgress{Agent: "tester.ann.s1", Chunks: 1, Bytes: 7, Started: start, LastChunk: time.Now(), Text: "working"})
	inbox := nats.NewInbox()
	sub, err := q.nc.SubscribeSync(inbox)
	if err != nil {
		return executors.Result{}, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := q.nc.Flush(); err != nil {
		return executors.Result{}, err
	}
	obs.Query(executors.AgentQuery{ID: "q1", ReplySubject: inbox, Prompt: "ship it on Friday?", Agent: "tester.ann.s1", At: time.Now()})
	m, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return executors.Result{}, err
	}
	q.answers <- string(m.Data)
	obs.Progress(executors.CallProgress{Agent: "tester.ann.s1", Started: start, Done: true})
	return executors.Stub{}.Execute(ctx, req)
}

// TestInboxAnswersAnAgent: the inbox lists an agent's question with the
// agent and its age; the capsule's page and the call endpoint show the
// running call; the console's answer (a resume with an answer) reaches the
// agent and the capsule completes, the answer recorded with its author.
func TestInboxAnswersAnAgent(t *testing.T) {
	t.Parallel()
	q := &questioner{answers: make(chan string, 1)}
	b := sagatest.Run(t, func(c *pipeline.Config) { c.Executors.RegisterExecutor("asking", q) })
	q.nc, _ = natstest.Connect(t, b.Server)
	svc, err := adminsvc.Start(b.NC, b.Pipeline.Admin(), adminsvc.Config{Logger: testLogger(t), Calls: b.Pipeline.Calls()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	c, err := New(b.Pipeline.Store(), adminsvc.NewClient(b.NC, adminsvc.ClientConfig{Timeout: 10 * time.Second}),
		Config{Logger: testLogger(t), Calls: b.Pipeline.Calls()})
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(func() { c.Stop(); srv.Close() })
	f := &fixture{nc: b.NC, console: c, srv: srv, client: b.Client, st: b.Store}

	doc := b.Own(t, capsuletest.New().Set("task.kind", "asking"))
	id := f.publish(t, doc)
	var in InboxView
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		require.Equal(t, http.StatusOK, f.get(t, "/ui/api/inbox", &in))
		return len(in.Paused) == 1 && in.Paused[0].Query != nil
	}, "the question never reached the inbox")
	row := in.Paused[0]
	require.Equal(t, capsule.TriggerAgentQuery, row.Trigger)
	require.Equal(t, "ship it on Friday?", row.Query.Prompt)
	require.Equal(t, "tester.ann.s1", row.Query.Agent)
	require.True(t, row.NeedsYou)

	var page CapsuleView
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/capsules/"+id, &page))
	require.NotNil(t, page.Status.Call)
	require.Equal(t, "working", page.Status.Call.Text)
	require.Len(t, page.Status.Questions, 1)
	var call CallView
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/calls/"+id, &call))
	require.NotNil(t, call.Call)
	require.Equal(t, 1, call.Call.Chunks)

	code, body := f.act(t, "resume", map[string]any{"id": id, "by": "dana", "answer": "no, Monday"}, nil)
	require.Equal(t, http.StatusOK, code, body)
	select {
	case got := <-q.answers:
		require.Equal(t, "no, Monday", got)
	case <-time.After(10 * time.Second):
		t.Fatal("the console's answer never reached the agent")
	}
	f.wait(t, id, capsule.Completed)
	cp, _, err := b.Store.Checkpoints.Get(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, capsule.OperatorAnswer{Text: "no, Monday", By: "dana", At: cp.State.OperatorAnswer.At}, *cp.State.OperatorAnswer)
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/calls/"+id, &call))
	require.Nil(t, call.Call, "the call is gone once recorded")
}
