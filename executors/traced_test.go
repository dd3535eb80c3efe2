package executors_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/tracing"
)

// tracedRegistry is a registry whose calls record spans in memory, and a
// context holding a phase span for them to descend from.
func tracedRegistry(t *testing.T) (*executors.Registry, *tracetest.InMemoryExporter, context.Context, trace.Span) {
	t.Helper()
	spans := tracetest.NewInMemoryExporter()
	tp := tracing.NewProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reg := executors.NewRegistry()
	reg.SetTracer(tracing.New(tp))
	ctx, phase := tp.Tracer("test").Start(context.Background(), "phase EXECUTION")
	return reg, spans, ctx, phase
}

func onlySpan(t *testing.T, spans *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	var got []tracetest.SpanStub
	for _, s := range spans.GetSpans() {
		if s.Name == name {
			got = append(got, s)
		}
	}
	require.Len(t, got, 1, "spans named %q", name)
	return got[0]
}

func attrOf(s tracetest.SpanStub, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func TestNATSCallsCarryTraceparent(t *testing.T) {
	t.Parallel()
	client, worker := natsSetup(t)
	headers := make(chan micro.Headers, 2)
	serveMicro(t, worker, "agents.demo.execute", func(r micro.Request) {
		headers <- r.Headers()
		_ = r.Respond([]byte(`{"status":"ok","content":{"summary":"done"}}`))
	})
	reg, spans, ctx, phase := tracedRegistry(t)
	reg.RegisterExecutor("demo", executors.NATSExecutor{Conn: client, Subject: "agents.demo.execute", Timeout: 5 * time.Second})
	ex, err := reg.Executor("demo")
	require.NoError(t, err)
	req := execRequest(t)
	_, err = ex.Execute(ctx, req)
	require.NoError(t, err)

	call := onlySpan(t, spans, "agent execute demo")
	require.Equal(t, phase.SpanContext().SpanID(), call.Parent.SpanID())
	require.Equal(t, "ok", attrOf(call, tracing.AttrOutcome).AsString())
	require.Equal(t, "execute", attrOf(call, tracing.AttrCall).AsString())
	require.Equal(t, "demo", attrOf(call, tracing.AttrAgent).AsString())
	require.Equal(t, "invoke_agent", attrOf(call, tracing.AttrGenAIOperationName).AsString())
	require.Equal(t, "demo", attrOf(call, tracing.AttrGenAIAgentName).AsString())
	require.Equal(t, req.Capsule.CapsuleID, attrOf(call, tracing.AttrCapsuleID).AsString())
	require.Equal(t, int64(2), attrOf(call, tracing.AttrCycle).AsInt64())

	// The worker gets the call span's context as W3C spells it.
	h := <-headers
	require.Equal(t, []string{tracing.FormatTraceparent(call.SpanContext)}, h["traceparent"])
	sc, err := tracing.ParseTraceparent(h.Get("traceparent"))
	require.NoError(t, err)
	require.Equal(t, phase.SpanContext().TraceID(), sc.TraceID())
}

func TestNATSReviewCarriesTraceparent(t *testing.T) {
	t.Parallel()
	client, worker := natsSetup(t)
	headers := make(chan micro.Headers, 1)
	serveMicro(t, worker, "agents.rev.review", func(r micro.Request) {
		headers <- r.Headers()
		_ = r.Respond([]byte(`{"verdict":"APPROVED","findings":[]}`))
	})
	reg, spans, ctx, phase := tracedRegistry(t)
	reg.RegisterReviewer("rev", executors.NATSReviewer{Conn: client, Subject: "agents.rev.review", Timeout: 5 * time.Second})
	rv, err := reg.Reviewer("rev")
	require.NoError(t, err)
	_, err = rv.Review(ctx, reviewRequest(t))
	require.NoError(t, err)
	call := onlySpan(t, spans, "agent review rev")
	require.Equal(t, phase.SpanContext().SpanID(), call.Parent.SpanID())
	require.Equal(t, tracing.FormatTraceparent(call.SpanContext), (<-headers).Get("traceparent"))
}

func TestCommandGetsTRACEPARENT(t *testing.T) {
	dir := t.TempDir()
	cmd := shellScript(t, dir, `printf '%s' "$TRACEPARENT" > "$OUT/tp"
echo '{"content":1}'`)
	cmd.Env = append(cmd.Env, "TRACEPARENT=00-11111111111111111111111111111111-2222222222222222-01")
	reg, spans, ctx, _ := tracedRegistry(t)
	reg.RegisterExecutor("cmd", cmd)
	ex, err := reg.Executor("cmd")
	require.NoError(t, err)
	_, err = ex.Execute(ctx, execRequest(t))
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, "tp"))
	require.NoError(t, err)
	require.Equal(t, tracing.FormatTraceparent(onlySpan(t, spans, "agent execute cmd").SpanContext), string(b),
		"the call's, not one from Env")
}

func TestNoopTracerStillPassesTheContext(t *testing.T) {
	t.Parallel()
	// A no-op tracer: the request carries the capsule's span context from ctx.
	root, err := tracing.ParseTraceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	require.NoError(t, err)
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), root)
	reg := executors.NewRegistry()
	reg.SetTracer(tracing.New(nil))
	var got string
	reg.RegisterExecutor("x", execFunc(func(_ context.Context, req executors.Request) (executors.Result, error) {
		got = req.TraceParent
		return executors.Result{Content: []byte(`1`)}, nil
	}))
	ex, err := reg.Executor("x")
	require.NoError(t, err)
	_, err = ex.Execute(ctx, execRequest(t))
	require.NoError(t, err)
	require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", got)

	// Nothing in ctx: nothing to pass.
	_, err = ex.Execute(context.Background(), execRequest(t))
	require.NoError(t, err)
	require.Empty(t, got)
}

type execFunc func(context.Context, executors.Request) (executors.Result, error)

func (f execFunc) Execute(ctx context.Context, req executors.Request) (executors.Result, error) {
	return f(ctx, req)
}

func TestCallOutcome(t *testing.T) {
	t.Parallel()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		ctx  context.Context
		err  error
		want string
	}{
		{context.Background(), nil, "ok"},
		{context.Background(), &executors.AcceptedError{Subject: "saga.complete.x.1"}, "accepted"},
		{context.Background(), &executors.HumanInputError{Detail: "which file?"}, "human_input"},
		{context.Background(), &executors.FailedError{Detail: "model refused"}, "failed"},
		{cancelled, &executors.FailedError{Detail: "killed"}, "error"},
		{context.Background(), errors.New("no responders"), "error"},
	} {
		require.Equal(t, tc.want, executors.CallOutcome(tc.ctx, tc.err), "%v", tc.err)
	}
}

func TestFailedCallSpan(t *testing.T) {
	t.Parallel()
	reg, spans, ctx, _ := tracedRegistry(t)
	reg.RegisterExecutor("bad", execFunc(func(context.Context, executors.Request) (executors.Result, error) {
		return executors.Result{}, &executors.FailedError{Detail: "model refused"}
	}))
	ex, err := reg.Executor("bad")
	require.NoError(t, err)
	_, err = ex.Execute(ctx, execRequest(t))
	require.Error(t, err)
	call := onlySpan(t, spans, "agent execute bad")
	require.Equal(t, "failed", attrOf(call, tracing.AttrOutcome).AsString())
	require.True(t, strings.Contains(call.Status.Description, "model refused"))
}
