package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/examples/worker/worker"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/schemas"
	"github.com/sagad/sagad/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type tlog struct{ t testing.TB }

func (w tlog) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

func logger(t testing.TB, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: level}))
}

// serve starts the worker on nc, stopped on cleanup.
func serve(t *testing.T, nc *nats.Conn, cfg worker.Config) {
	t.Helper()
	cfg.Logger = logger(t, slog.LevelInfo)
	svc, err := worker.Serve(nc, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Stop() })
}

// demoCapsule is examples/worker/demo-capsule.json, as published.
func demoCapsule(t *testing.T) ([]byte, *capsule.Capsule) {
	t.Helper()
	raw, err := os.ReadFile("../demo-capsule.json")
	require.NoError(t, err)
	c := new(capsule.Capsule)
	require.NoError(t, json.Unmarshal(raw, c))
	return raw, c
}

// TestDemoEndToEnd is the README's demo: sagad configured like
// examples/sagad.json, the worker beside it, the demo capsule through all
// seven phases with the worker's artifact — answered at once, and with
// --async, where the artifact comes back in a completion that carries the
// call's completion token.
func TestDemoEndToEnd(t *testing.T) {
	t.Parallel()
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprintf("async=%v", async), func(t *testing.T) {
			t.Parallel()
			demoEndToEnd(t, async)
		})
	}
}

func demoEndToEnd(t *testing.T, async bool) {
	s := natstest.RunServer(t)
	workerConn, _ := natstest.Connect(t, s)
	serve(t, workerConn, worker.Config{AgentID: "demo-worker-e2e", Async: async})

	nc, js := natstest.Connect(t, s)
	b, err := os.ReadFile("../../sagad.json")
	require.NoError(t, err)
	var cfg executors.Config
	require.NoError(t, json.Unmarshal(b, &cfg), "examples/sagad.json's executors and reviewers")
	reg, err := cfg.Build(nc)
	require.NoError(t, err)

	workspace, err := filepath.Abs("../../..")
	require.NoError(t, err)
	ctx := context.Background()
	p, err := pipeline.New(ctx, js, pipeline.Config{
		Logger:     logger(t, slog.LevelWarn),
		Workspace:  workspace,
		Workers:    2,
		AckWait:    2 * time.Second,
		Heartbeat:  300 * time.Millisecond,
		RetryDelay: 50 * time.Millisecond,
		Executors:  reg,
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

	raw, c := demoCapsule(t)
	require.Equal(t, "demo", c.Task.Kind)
	require.Equal(t, worker.DefaultReviewerID, c.Review.ReviewerAgentID)
	_, err = cl.Publish(ctx, raw, "")
	require.NoError(t, err)

	var st client.Status
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		st, err = cl.Status(ctx, c.CapsuleID)
		// With --async, the capsule is paused while the work runs.
		return err == nil && st.State.Terminal()
	}, "capsule %s never ended (last %s)", c.CapsuleID, st.State)
	require.Equal(t, capsule.Completed, st.State, "halt: %s", st.HaltReason)
	var path []string
	for _, h := range st.History {
		path = append(path, h.PhaseName+"/"+h.Outcome)
	}
	require.Equal(t, []string{
		"RECEPTION/passed", "REALITY_ANCHOR/passed", "PLANNING/passed", "AUTOMATED_GATES/passed",
		"EXECUTION/passed", "REVIEW/passed", "HANDOFF/completed",
	}, path)
	require.Equal(t, 1, st.CyclesUsed)

	// The artifact is the worker's.
	kept, err := store.Open(ctx, js)
	require.NoError(t, err)
	b, err = kept.Artifacts.Bytes(ctx, store.ArtifactRef(c.CapsuleID, 1))
	require.NoError(t, err)
	require.NoError(t, schemas.Validate(schemas.Artifact, b))
	var art capsule.Artifact
	require.NoError(t, json.Unmarshal(b, &art))
	require.Equal(t, "application/json", art.MediaType)
	var content worker.Artifact
	require.NoError(t, json.Unmarshal(art.Content, &content))
	require.Equal(t, "demo-worker-e2e", content.ProducedBy)
	require.Equal(t, c.Spec.AcceptanceCriteria, content.AcceptanceCriteria)
	require.Equal(t, c.Task.Title, content.Title)
	require.Equal(t, 1, content.Cycle)
	require.Equal(t, int64(len(c.Task.Title)+len(c.Task.Description)), art.Usage.Tokens)

	// Its usage, and the review's, were charged to the budget.
	cp, err := cl.Checkpoint(ctx, c.CapsuleID)
	require.NoError(t, err)
	require.Greater(t, cp.State.BudgetUsed.Tokens, art.Usage.Tokens)
	require.Len(t, cp.State.Reviews, 1)
	require.Equal(t, capsule.Approved, cp.State.Reviews[0].Verdict)
	require.Equal(t, worker.DefaultReviewerID, cp.State.Reviews[0].ReviewerID)
}

// call sends one wire request to the worker.
func call(t *testing.T, nc *nats.Conn, subject string, body any, key string) []byte {
	t.Helper()
	data, err := json.Marshal(body)
	require.NoError(t, err)
	msg := nats.NewMsg(subject)
	msg.Data = data
	msg.Header.Set(executors.HeaderIdempotencyKey, key)
	msg.Header.Set(executors.HeaderCapsuleID, "de300000-0000-4000-8000-000000000001")
	msg.Header.Set(executors.HeaderCycle, "1")
	msg.Header[executors.HeaderTraceparent] = []string{callTraceparent}
	resp, err := nc.RequestMsg(msg, 5*time.Second)
	require.NoError(t, err)
	return resp.Data
}

// callTraceparent is the W3C trace context test calls carry, as sagad's do.
const callTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

func executeCall(t *testing.T, findings ...capsule.Finding) executors.ExecuteCall {
	t.Helper()
	raw, c := demoCapsule(t)
	token, err := executors.NewCompletionToken()
	require.NoError(t, err)
	call, err := executors.NewExecuteCall(executors.Request{Capsule: c, Raw: raw, Cycle: 1, IdempotencyKey: c.CapsuleID + "/1", Findings: findings, CompletionToken: token})
	require.NoError(t, err)
	return call
}

func TestExecuteDeduplicates(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, s)
	serve(t, nc, worker.Config{})

	first := call(t, nc, worker.DefaultExecuteSubject, executeCall(t), "k/1")
	reply, err := executors.DecodeExecutorReply(first)
	require.NoError(t, err)
	require.Equal(t, executors.StatusOK, reply.Status)

	// The same key gets the same answer, even for a different request.
	again := call(t, nc, worker.DefaultExecuteSubject, executeCall(t, capsule.Finding{Message: "more"}), "k/1")
	require.Equal(t, string(first), string(again))
	// A new key (the next cycle) is new work.
	next := call(t, nc, worker.DefaultExecuteSubject, executeCall(t, capsule.Finding{Message: "more"}), "k/2")
	reply, err = executors.DecodeExecutorReply(next)
	require.NoError(t, err)
	var a worker.Artifact
	require.NoError(t, json.Unmarshal(reply.Content, &a))
	require.Equal(t, []string{"more"}, a.AddressedFindings)

	bad := call(t, nc, worker.DefaultExecuteSubject, map[string]any{"capsule": 42}, "k/3")
	reply, err = executors.DecodeExecutorReply(bad)
	require.NoError(t, err)
	require.Equal(t, executors.StatusFailed, reply.Status)
	require.Contains(t, reply.Error, "bad capsule")
}

func TestReviewVerdicts(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, s)
	serve(t, nc, worker.Config{})
	raw, c := demoCapsule(t)
	good, err := json.Marshal(worker.Artifact{AcceptanceCriteria: c.Spec.AcceptanceCriteria})
	require.NoError(t, err)
	partial, err := json.Marshal(worker.Artifact{AcceptanceCriteria: c.Spec.AcceptanceCriteria[:1]})
	require.NoError(t, err)
	self := *c
	self.ProducerAgentID = worker.DefaultReviewerID

	tests := []struct {
		name    string
		capsule *capsule.Capsule
		content string
		verdict capsule.Verdict
		finding string
	}{
		{"covers every criterion", c, string(good), capsule.Approved, ""},
		{"empty artifact", c, `{}`, capsule.ChangesRequested, "the artifact is empty"},
		{"missing criterion", c, string(partial), capsule.ChangesRequested, `acceptance criterion "every acceptance criterion is restated" is not addressed`},
		{"own producer", &self, string(good), capsule.Rejected, "demo-reviewer produced this artifact and cannot review it"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := executors.ReviewRequest{Capsule: tt.capsule, Cycle: 1, Artifact: capsule.Artifact{Content: json.RawMessage(tt.content)}}
			if tt.capsule == c {
				req.Raw = raw
			}
			body, err := executors.NewReviewCall(req)
			require.NoError(t, err)
			reply, err := executors.DecodeReviewerReply(call(t, nc, worker.DefaultReviewSubject, body, "r/"+string(rune('a'+i))))
			require.NoError(t, err)
			require.Equal(t, tt.verdict, reply.Verdict)
			require.Positive(t, reply.Usage.Tokens)
			if tt.finding == "" {
				require.Empty(t, reply.Findings)
				return
			}
			require.Equal(t, tt.finding, reply.Findings[0].Message)
		})
	}
}

func TestAsyncPublishesCompletion(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, s)
	serve(t, nc, worker.Config{Async: true})
	sub, err := nc.SubscribeSync(executors.CompletionPrefix + ">")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	first := executeCall(t)
	reply, err := executors.DecodeExecutorReply(call(t, nc, worker.DefaultExecuteSubject, first, "a/1"))
	require.NoError(t, err)
	require.Equal(t, executors.StatusAccepted, reply.Status)

	msg, err := sub.NextMsg(5 * time.Second)
	require.NoError(t, err)
	require.Equal(t, executors.CompletionSubject("de300000-0000-4000-8000-000000000001", 1), msg.Subject)
	done, err := executors.DecodeCompletion(msg.Data)
	require.NoError(t, err)
	require.Equal(t, executors.KindExecute, done.Kind)
	require.Equal(t, first.CompletionToken, done.CompletionToken, "the completion carries the call's token")
	require.Equal(t, callTraceparent, msg.Header.Get(executors.HeaderTraceparent), "and its trace context")
	res, err := done.ExecutorReply().Result()
	require.NoError(t, err)
	var a worker.Artifact
	require.NoError(t, json.Unmarshal(res.Content, &a))
	require.Equal(t, worker.DefaultAgentID, a.ProducedBy)

	// A repeat of the call (sagad restarted, say) carries a new token: the
	// same result goes out again, with the latest token.
	second := executeCall(t)
	require.NotEqual(t, first.CompletionToken, second.CompletionToken)
	reply, err = executors.DecodeExecutorReply(call(t, nc, worker.DefaultExecuteSubject, second, "a/1"))
	require.NoError(t, err)
	require.Equal(t, executors.StatusAccepted, reply.Status)
	msg, err = sub.NextMsg(5 * time.Second)
	require.NoError(t, err)
	again, err := executors.DecodeCompletion(msg.Data)
	require.NoError(t, err)
	require.Equal(t, second.CompletionToken, again.CompletionToken, "the repeat's completion carries the latest token")
	require.Equal(t, string(done.Content), string(again.Content), "and the first answer")
}

// TestFailFirstIsRetryable: metadata.worker.fail_first fails the first
// attempt with retryable: true; the retry (previous_failure set, its own
// key) succeeds and says what it healed from.
func TestFailFirstIsRetryable(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, s)
	serve(t, nc, worker.Config{})

	call1 := executeCall(t)
	call1.Capsule = json.RawMessage(strings.Replace(string(call1.Capsule), "{", `{"metadata":{"worker":{"fail_first":true}},`, 1))
	reply, err := executors.DecodeExecutorReply(call(t, nc, worker.DefaultExecuteSubject, call1, "k/1"))
	require.NoError(t, err)
	require.Equal(t, executors.StatusFailed, reply.Status)
	require.True(t, reply.Retryable)

	call2 := call1
	call2.PreviousFailure = &executors.PreviousFailure{Attempt: 1, Error: reply.Error}
	reply, err = executors.DecodeExecutorReply(call(t, nc, worker.DefaultExecuteSubject, call2, "k/1/a2"))
	require.NoError(t, err)
	require.Equal(t, executors.StatusOK, reply.Status)
	var a worker.Artifact
	require.NoError(t, json.Unmarshal(reply.Content, &a))
	require.Contains(t, a.HealedFrom, "transient failure")
}
