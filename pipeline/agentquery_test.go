package pipeline_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/sagatest"
)

// asking is an executor that streams like an agent: it reports progress,
// asks a question on a reply subject of its own, and waits for the answer
// (or, with failFirst, ends its first call right after asking, as an agent
// whose stream ends before it is answered).
type asking struct {
	nc *nats.Conn
	// answers receives what arrived at the reply subject.
	answers chan string
	// seen receives the operator_answer each call carried ("" for none).
	seen      chan string
	failFirst bool
	calls     *atomic.Int64
	// failAfterAnswer fails the first call once it has its answer.
	failAfterAnswer bool
	// hang, when set, holds the first call after its question until it
	// closes, deaf to its context: a sagad that hangs or dies mid-call.
	hang chan struct{}
}

func (a asking) Execute(ctx context.Context, req executors.Request) (executors.Result, error) {
	n := a.calls.Add(1)
	seen := ""
	if req.OperatorAnswer != nil {
		seen = req.OperatorAnswer.Text
	}
	a.seen <- seen
	obs := executors.ObserverFrom(ctx)
	started := time.Now()
	obs.Progress(executors.CallProgress{Agent: "tester.ann.s1", Subject: "agents.prompt.tester.ann.s1", Chunks: 2, Bytes: 11,
		Started: started, LastChunk: time.Now(), Text: "hello world"})
	if n > 1 {
		// A later attempt asks nothing.
		obs.Progress(executors.CallProgress{Agent: "tester.ann.s1", Started: started, Done: true})
		return executors.Stub{}.Execute(ctx, req)
	}
	inbox := nats.NewInbox()
	sub, err := a.nc.SubscribeSync(inbox)
	if err != nil {
		return executors.Result{}, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := a.nc.Flush(); err != nil {
		return executors.Result{}, err
	}
	obs.Query(executors.AgentQuery{ID: "q1", ReplySubject: inbox, Prompt: "which licence?", Agent: "tester.ann.s1", At: time.Now()})
	if a.failFirst {
		return executors.Result{}, &executors.FailedError{Detail: "stream ended", ExitCode: executors.ExitFailure}
	}
	if a.hang != nil {
		<-a.hang
		return executors.Result{}, errors.New("the sagad of this call is gone")
	}
	msg, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return executors.Result{}, err
	}
	a.answers <- string(msg.Data)
	if a.failAfterAnswer {
		return executors.Result{}, &executors.FailedError{Detail: "stream ended", ExitCode: executors.ExitFailure}
	}
	obs.Progress(executors.CallProgress{Agent: "tester.ann.s1", Chunks: 3, Bytes: 20, Started: started, LastChunk: time.Now(), Done: true})
	return executors.Stub{}.Execute(ctx, req)
}

type askingFixture struct {
	b       *sagatest.Bundle
	ex      *asking
	svc     *adminsvc.Client
	doc     capsuletest.Doc
	pending func() []admin.PendingItem
}

// setupAsking runs a pipeline whose "asking" kind is ex (its failFirst,
// failAfterAnswer and hang as given), with change applied to its config.
func setupAsking(t *testing.T, ex asking, change ...func(*pipeline.Config)) askingFixture {
	t.Helper()
	b := sagatest.Run(t, func(c *pipeline.Config) {
		ex.answers, ex.seen, ex.calls = make(chan string, 4), make(chan string, 4), new(atomic.Int64)
		c.Executors.RegisterExecutor("asking", &ex)
		for _, ch := range change {
			ch(c)
		}
	})
	// The executor talks on a connection of its own, as an agent would.
	ex.nc, _ = natstest.Connect(t, b.Server)
	svc, err := adminsvc.Start(b.NC, b.Pipeline.Admin(), adminsvc.Config{Calls: b.Pipeline.Calls(), Logger: b.Logger})
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })
	a := b.Pipeline.Admin()
	doc := b.Own(t, capsuletest.New().Set("task.kind", "asking"))
	return askingFixture{b: b, ex: &ex, svc: adminsvc.NewClient(b.NC, adminsvc.ClientConfig{}), doc: doc,
		pending: func() []admin.PendingItem { return sagatest.PendingItems(t, a) }}
}

// TestAgentQueryAnswered: an agent's question parks the capsule with
// agent_query while the call goes on; pending, status and history show it;
// resume --answer reaches the agent at its reply subject, is recorded with
// who gave it, and the call completes the capsule.
func TestAgentQueryAnswered(t *testing.T) {
	t.Parallel()
	f := setupAsking(t, asking{})
	ctx := context.Background()
	b, id := f.b, f.doc.ID()
	b.Publish(t, f.doc.Sealed(t))
	cp := b.WaitCheckpoint(t, id, func(cp *capsule.Checkpoint) bool {
		return cp.State.Status == capsule.Paused && cp.State.Pause.Trigger == capsule.TriggerAgentQuery
	})
	require.Equal(t, capsule.Execution, cp.State.Phase)
	require.NotNil(t, cp.State.Execution, "the call keeps its claim")
	require.Equal(t, "tester.ann.s1 asks: which licence?", cp.State.Pause.Reason)

	items := f.pending()
	require.Len(t, items, 1)
	require.Equal(t, capsule.TriggerAgentQuery, items[0].Trigger)
	require.NotNil(t, items[0].Query)
	require.Equal(t, "q1", items[0].Query.ID)
	require.Equal(t, "tester.ann.s1", items[0].Query.Agent)
	require.Equal(t, "which licence?", items[0].Query.Prompt)

	st, err := f.svc.Status(ctx, id)
	require.NoError(t, err)
	require.NotNil(t, st.Call, "the running call is on the status of the sagad that runs it")
	require.Equal(t, "tester.ann.s1", st.Call.Agent)
	require.Equal(t, 2, st.Call.Chunks)
	require.Equal(t, "hello world", st.Call.Text)
	require.Equal(t, "EXECUTION", st.Call.PhaseName)
	require.Len(t, st.Questions, 1)
	require.Equal(t, "which licence?", st.Questions[0].Prompt)
	b.RequireContinuation(t, id, capsule.TriggerAgentQuery, capsule.Execution)
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return b.CountEvents(t, id)[capsule.EventAgentQuery] == 1
	}, "no agent_query event")

	// A plain resume is refused: the question waits for an answer.
	_, err = f.svc.Resume(ctx, adminsvc.ResumeRequest{ID: id, By: "dana"})
	require.ErrorIs(t, err, admin.ErrRefused)

	_, err = f.svc.Resume(ctx, adminsvc.ResumeRequest{ID: id, By: "dana", Answer: "MIT"})
	require.NoError(t, err)
	select {
	case got := <-f.ex.answers:
		require.Equal(t, "MIT", got)
	case <-time.After(10 * time.Second):
		t.Fatal("the answer never reached the agent's reply subject")
	}
	b.WaitState(t, id, capsule.Completed)
	cp, _, err = b.Store.Checkpoints.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "MIT", cp.State.OperatorAnswer.Text)
	require.Equal(t, "dana", cp.State.OperatorAnswer.By)
	require.Nil(t, cp.State.AgentQueries)
	var answered []capsule.Event
	for _, ev := range b.History(t, id) {
		if ev.Kind == capsule.EventAgentQueryAnswered {
			answered = append(answered, ev)
		}
	}
	require.Len(t, answered, 1)
	require.Equal(t, "dana", answered[0].By)
	require.Equal(t, "q1: MIT", answered[0].Detail)
	require.Equal(t, int64(1), f.ex.calls.Load(), "one call: the answer went to it")
	_, ok := b.Pipeline.Calls().Get(id, time.Now())
	require.False(t, ok, "the call is off the board once recorded")
	b.RequireNoContinuation(t, id)
}

// TestAgentQueryCallEndsFirst: a call that ends before its question is
// answered closes it: the capsule runs on (here, the failure policy's retry)
// and nothing waits for a person.
func TestAgentQueryCallEndsFirst(t *testing.T) {
	t.Parallel()
	f := setupAsking(t, asking{failFirst: true})
	b, id := f.b, f.doc.ID()
	b.Publish(t, f.doc.Sealed(t))
	b.WaitState(t, id, capsule.Completed)
	require.Equal(t, int64(2), f.ex.calls.Load(), "the retry is a new call")
	cp, _, err := b.Store.Checkpoints.Get(context.Background(), id)
	require.NoError(t, err)
	require.Nil(t, cp.State.AgentQueries)
	require.Nil(t, cp.State.OperatorAnswer, "nobody answered")
	require.Empty(t, f.pending())
	require.Len(t, cp.State.AttemptLog, 1)
}

// TestAgentQueryAnswerReachesTheNextAttempt: an answer given during a call
// that then fails is carried by the retry's request (operator_answer).
func TestAgentQueryAnswerReachesTheNextAttempt(t *testing.T) {
	t.Parallel()
	f := setupAsking(t, asking{failAfterAnswer: true})
	b, id := f.b, f.doc.ID()
	b.Publish(t, f.doc.Sealed(t))
	b.WaitCheckpoint(t, id, func(cp *capsule.Checkpoint) bool {
		return cp.State.Pause != nil && cp.State.Pause.Trigger == capsule.TriggerAgentQuery
	})
	_, err := f.svc.Resume(context.Background(), adminsvc.ResumeRequest{ID: id, By: "dana", Answer: "Apache-2.0"})
	require.NoError(t, err)
	b.WaitState(t, id, capsule.Completed)
	require.Equal(t, "", <-f.ex.seen, "the first call had no answer yet")
	require.Equal(t, "Apache-2.0", <-f.ex.seen, "the retry carries the answer")
}

// TestAgentQueryDeadline: the deadline holds while a question waits: the
// sweeper halts the capsule deadline_exceeded, its claim goes, and the
// call stops.
func TestAgentQueryDeadline(t *testing.T) {
	t.Parallel()
	f := setupAsking(t, asking{}, func(c *pipeline.Config) {
		c.DeadlineWarning = -1 // no deadline_approaching pause first
		c.SweepInterval = 200 * time.Millisecond
	})
	b := f.b
	doc := b.Own(t, capsuletest.New().Set("task.kind", "asking").Set("deadline", time.Now().Add(4*time.Second).UTC().Format(time.RFC3339)))
	id := doc.ID()
	b.Publish(t, doc.Sealed(t))
	b.WaitCheckpoint(t, id, func(cp *capsule.Checkpoint) bool {
		return cp.State.Pause != nil && cp.State.Pause.Trigger == capsule.TriggerAgentQuery
	})
	st := b.WaitState(t, id, capsule.Halted)
	require.Equal(t, "deadline_exceeded:EXECUTION", st.HaltReason)
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		_, ok := b.Pipeline.Calls().Get(id, time.Now())
		return !ok
	}, "the call never stopped")
	require.Empty(t, f.ex.answers, "nobody answered")
	require.Equal(t, int64(1), f.ex.calls.Load())
}

// TestAgentQueryOwnerDies: the sagad whose call asked dies (here: it stops
// while the call hangs, its claim lapses); another takes the redelivered
// message, its new claim ends the dead call's question, and the capsule
// completes on a new call without anyone answering.
func TestAgentQueryOwnerDies(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	// The hung call outlives the test: nothing of it may log to t.
	f := setupAsking(t, asking{hang: hang}, func(c *pipeline.Config) { c.Logger = slog.New(slog.DiscardHandler) })
	b, id := f.b, f.doc.ID()
	b.Publish(t, f.doc.Sealed(t))
	b.WaitCheckpoint(t, id, func(cp *capsule.Checkpoint) bool {
		return cp.State.Pause != nil && cp.State.Pause.Trigger == capsule.TriggerAgentQuery
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	b.Pipeline.Stop(ctx) // the hung call is left behind: its claim lapses
	b.Start(t, b.Config)
	b.WaitState(t, id, capsule.Completed)
	require.Equal(t, int64(2), f.ex.calls.Load(), "a new call, after the dead one")
	cp, _, err := b.Store.Checkpoints.Get(context.Background(), id)
	require.NoError(t, err)
	require.Nil(t, cp.State.AgentQueries)
	require.Nil(t, cp.State.OperatorAnswer)
	require.Empty(t, f.pending())
}
