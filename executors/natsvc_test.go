package executors_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
)

// fastRetry keeps retry tests quick.
var fastRetry = executors.RetryPolicy{Attempts: 3, Initial: time.Millisecond, Max: 5 * time.Millisecond}

// natsSetup returns a client connection and a connection that serves.
func natsSetup(t *testing.T) (client, worker *nats.Conn) {
	t.Helper()
	s := natstest.RunServer(t)
	client, _ = natstest.Connect(t, s)
	worker, _ = natstest.Connect(t, s)
	return client, worker
}

// serveMicro registers handler as a micro endpoint on subject.
func serveMicro(t *testing.T, nc *nats.Conn, subject string, handler micro.HandlerFunc) {
	t.Helper()
	svc, err := micro.AddService(nc, micro.Config{Name: "test-worker", Version: "0.0.1"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Stop() })
	require.NoError(t, svc.AddEndpoint("call", handler, micro.WithEndpointSubject(subject)))
	// The client is another connection: without a flush its first request
	// can reach the server before this subscription does (no responders).
	require.NoError(t, nc.Flush())
}

// fixedReply answers with a fixed JSON body.
func fixedReply(body string) micro.HandlerFunc {
	return func(r micro.Request) { _ = r.Respond([]byte(body)) }
}

func execRequest(t *testing.T) executors.Request {
	t.Helper()
	doc := capsuletest.New().Set("task.kind", "demo")
	raw := doc.Sealed(t)
	c := new(capsule.Capsule)
	require.NoError(t, json.Unmarshal(raw, c))
	return executors.Request{
		Capsule: c, Raw: raw, Cycle: 2,
		IdempotencyKey: c.CapsuleID + "/2", TraceID: "trace-123",
		Findings:        []capsule.Finding{{Message: "add tests"}},
		CompletionToken: strings.Repeat("5e", 32),
		CallToken:       strings.Repeat("c4", 32),
	}
}

func reviewRequest(t *testing.T) executors.ReviewRequest {
	t.Helper()
	req := execRequest(t)
	return executors.ReviewRequest{
		Capsule: req.Capsule, Raw: req.Raw, Cycle: req.Cycle,
		IdempotencyKey: req.IdempotencyKey, TraceID: req.TraceID,
		Artifact: capsule.Artifact{CapsuleID: req.Capsule.CapsuleID, Cycle: 2, Content: json.RawMessage(`{"a":1}`)},
	}
}

func TestNATSExecutorOK(t *testing.T) {
	t.Parallel()
	client, worker := natsSetup(t)
	req := execRequest(t)
	calls := make(chan micro.Request, 1)
	serveMicro(t, worker, "agents.demo.execute", func(r micro.Request) {
		calls <- r
		_ = r.Respond([]byte(`{"status":"ok","content":{"summary":"done"},"usage":{"tokens":42,"dollars":0.5}}`))
	})

	ex := executors.NATSExecutor{Conn: client, Subject: "agents.demo.execute", Timeout: 5 * time.Second}
	res, err := ex.Execute(context.Background(), req)
	require.NoError(t, err)
	require.JSONEq(t, `{"summary":"done"}`, string(res.Content))
	require.Equal(t, "application/json", res.MediaType)
	require.Equal(t, capsule.Usage{Tokens: 42, Dollars: 0.5}, res.Usage)

	// The request carries the wire body and the headers.
	r := <-calls
	h := r.Headers()
	require.Equal(t, req.Capsule.CapsuleID, h.Get(executors.HeaderCapsuleID))
	require.Equal(t, "2", h.Get(executors.HeaderCycle))
	require.Equal(t, req.IdempotencyKey, h.Get(executors.HeaderIdempotencyKey))
	require.Equal(t, "trace-123", h.Get(executors.HeaderTraceID))
	var call executors.ExecuteCall
	require.NoError(t, json.Unmarshal(r.Data(), &call))
	require.Equal(t, executors.KindExecute, call.Kind)
	require.JSONEq(t, string(req.Raw), string(call.Capsule))
	require.Equal(t, 2, call.Cycle)
	require.Equal(t, req.IdempotencyKey, call.IdempotencyKey)
	require.Equal(t, "trace-123", call.TraceID)
	require.Equal(t, req.Findings, call.Findings)
	require.Equal(t, req.CompletionToken, call.CompletionToken, "the body carries the completion token")
	for k, v := range h {
		require.NotContains(t, strings.Join(v, " "), req.CompletionToken, "header %s: the token stays out of headers", k)
	}
}

func TestNATSExecutorAnswers(t *testing.T) {
	t.Parallel()
	client, worker := natsSetup(t)
	tests := []struct {
		name  string
		reply micro.HandlerFunc
		check func(t *testing.T, req executors.Request, res executors.Result, err error)
	}{
		{
			name:  "failed reply halts with the worker's error and usage",
			reply: fixedReply(`{"status":"failed","error":"model refused","usage":{"tokens":7}}`),
			check: func(t *testing.T, _ executors.Request, res executors.Result, err error) {
				var failed *executors.FailedError
				require.ErrorAs(t, err, &failed)
				require.Equal(t, `nats executor "demo": model refused`, failed.Detail)
				require.Equal(t, int64(7), failed.Usage.Tokens)
				require.Equal(t, int64(7), res.Usage.Tokens)
			},
		},
		{
			name:  "accepted reply",
			reply: fixedReply(`{"status":"accepted"}`),
			check: func(t *testing.T, req executors.Request, _ executors.Result, err error) {
				require.ErrorIs(t, err, executors.ErrAccepted)
				var accepted *executors.AcceptedError
				require.ErrorAs(t, err, &accepted)
				require.Equal(t, "saga.complete."+req.Capsule.CapsuleID+".2", accepted.Subject)
				require.Equal(t, executors.DefaultCompletionTimeout, accepted.Timeout)
			},
		},
		{
			name:  "malformed reply",
			reply: fixedReply(`{"status":"ok"}`),
			check: func(t *testing.T, _ executors.Request, _ executors.Result, err error) {
				var failed *executors.FailedError
				require.ErrorAs(t, err, &failed)
				require.Contains(t, failed.Detail, `nats executor "demo": malformed reply: status "ok" without content`)
			},
		},
		{
			name:  "not JSON",
			reply: fixedReply(`hello`),
			check: func(t *testing.T, _ executors.Request, _ executors.Result, err error) {
				var failed *executors.FailedError
				require.ErrorAs(t, err, &failed)
				require.Contains(t, failed.Detail, "malformed reply")
			},
		},
		{
			name: "micro service error",
			reply: func(r micro.Request) {
				_ = r.Error("503", "model overloaded", nil)
			},
			check: func(t *testing.T, _ executors.Request, _ executors.Result, err error) {
				var failed *executors.FailedError
				require.ErrorAs(t, err, &failed)
				require.Equal(t, `nats executor "demo": service error 503: model overloaded`, failed.Detail)
			},
		},
	}
	for i, tt := range tests {
		subject := "agents.answers." + string(rune('a'+i))
		serveMicro(t, worker, subject, tt.reply)
		t.Run(tt.name, func(t *testing.T) {
			ex := executors.NATSExecutor{Conn: client, Subject: subject, Name: "demo", Timeout: 5 * time.Second, Retry: fastRetry}
			req := execRequest(t)
			res, err := ex.Execute(context.Background(), req)
			tt.check(t, req, res, err)
		})
	}
}

func TestNATSExecutorNoRespondersRetriesThenFails(t *testing.T) {
	t.Parallel()
	client, _ := natsSetup(t)
	ex := executors.NATSExecutor{Conn: client, Subject: "agents.nobody.home", Name: "research", Timeout: 5 * time.Second, Retry: fastRetry}
	_, err := ex.Execute(context.Background(), execRequest(t))
	var failed *executors.FailedError
	require.ErrorAs(t, err, &failed)
	require.Equal(t, `nats executor "research": no responders after 3 attempts`, failed.Detail)
}

func TestNATSExecutorTimeoutThenSuccess(t *testing.T) {
	t.Parallel()
	client, worker := natsSetup(t)
	var calls atomic.Int64
	keys := make(chan string, 16)
	serveMicro(t, worker, "agents.slow.execute", func(r micro.Request) {
		select {
		case keys <- r.Headers().Get(executors.HeaderIdempotencyKey):
		default:
		}
		if calls.Add(1) == 1 {
			return // the first attempt gets no reply and times out
		}
		_ = r.Respond([]byte(`{"content":"second time lucky"}`))
	})
	// Generous per attempt, so a loaded CI machine still answers the second
	// one in time; the first gets no answer whatever the timeout.
	ex := executors.NATSExecutor{Conn: client, Subject: "agents.slow.execute", Timeout: 3 * time.Second, Retry: fastRetry}
	req := execRequest(t)
	res, err := ex.Execute(context.Background(), req)
	require.NoError(t, err)
	require.JSONEq(t, `"second time lucky"`, string(res.Content))
	require.Equal(t, int64(2), calls.Load())
	// Both attempts carry the same idempotency key, so the worker can de-duplicate.
	require.Equal(t, req.IdempotencyKey, <-keys)
	require.Equal(t, req.IdempotencyKey, <-keys)
}

func TestNATSExecutorTimeoutExhausted(t *testing.T) {
	t.Parallel()
	client, worker := natsSetup(t)
	serveMicro(t, worker, "agents.mute.execute", func(micro.Request) {})
	ex := executors.NATSExecutor{Conn: client, Subject: "agents.mute.execute", Timeout: 50 * time.Millisecond,
		Retry: executors.RetryPolicy{Attempts: 2, Initial: time.Millisecond}}
	_, err := ex.Execute(context.Background(), execRequest(t))
	var failed *executors.FailedError
	require.ErrorAs(t, err, &failed)
	require.Equal(t, `nats executor "agents.mute.execute": no reply within 50ms after 2 attempts`, failed.Detail)
}

func TestNATSExecutorCancelledBetweenAttempts(t *testing.T) {
	t.Parallel()
	client, _ := natsSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	// Backoffs far longer than ctx: the wait is cut short by ctx.
	ex := executors.NATSExecutor{Conn: client, Subject: "agents.nobody.home",
		Retry: executors.RetryPolicy{Attempts: 5, Initial: time.Minute}}
	start := time.Now()
	_, err := ex.Execute(ctx, execRequest(t))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var failed *executors.FailedError
	require.False(t, errors.As(err, &failed), "a cancelled call is not the executor's failure: %v", err)
	require.Less(t, time.Since(start), 10*time.Second)
}

func TestNATSReviewer(t *testing.T) {
	t.Parallel()
	client, worker := natsSetup(t)
	calls := make(chan micro.Request, 1)
	serveMicro(t, worker, "agents.demo.review", func(r micro.Request) {
		calls <- r
		_ = r.Respond([]byte(`{"verdict":"CHANGES_REQUESTED","findings":[{"field":"content","message":"too short"}],"usage":{"tokens":3}}`))
	})
	serveMicro(t, worker, "agents.bad.review", fixedReply(`{"verdict":"MAYBE"}`))

	req := reviewRequest(t)
	rv := executors.NATSReviewer{Conn: client, Subject: "agents.demo.review", Timeout: 5 * time.Second}
	res, err := rv.Review(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, capsule.ChangesRequested, res.Verdict)
	require.Equal(t, []capsule.Finding{{Field: "content", Message: "too short"}}, res.Findings)
	require.Equal(t, int64(3), res.Usage.Tokens)

	r := <-calls
	require.Equal(t, req.IdempotencyKey, r.Headers().Get(executors.HeaderIdempotencyKey))
	require.Equal(t, "trace-123", r.Headers().Get(executors.HeaderTraceID))
	var call executors.ReviewCall
	require.NoError(t, json.Unmarshal(r.Data(), &call))
	require.Equal(t, executors.KindReview, call.Kind)
	require.JSONEq(t, `{"a":1}`, string(call.Artifact.Content))

	bad := executors.NATSReviewer{Conn: client, Subject: "agents.bad.review", Name: "picky", Timeout: 5 * time.Second}
	_, err = bad.Review(context.Background(), req)
	var failed *executors.FailedError
	require.ErrorAs(t, err, &failed)
	require.Contains(t, failed.Detail, `nats reviewer "picky": malformed reply: verdict "MAYBE"`)
}
