package tracing_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sagad/sagad/internal/tracing"
)

// TestGenAIAttributes: what a model executor records on its call's span,
// under OpenTelemetry's gen_ai names; unknowns are left out, not zero.
func TestGenAIAttributes(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewInMemoryExporter()
	tp := tracing.NewProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := tracing.New(tp)

	_, span := tr.StartCall(context.Background(), "execute", "code", "c1", 1)
	tracing.GenAIRequest(span, tracing.GenAISystemOpenAI, tracing.GenAIOperationChat, "gpt-x")
	tracing.GenAIResponse(span, "gpt-x-2025", 1200, 345)
	tracing.EndCall(span, "ok", nil)
	_, span = tr.StartCall(context.Background(), "review", "rev", "c1", 1)
	tracing.GenAIRequest(span, tracing.GenAISystemAnthropic, "", "")
	tracing.GenAIResponse(span, "", 0, -1)
	tracing.EndCall(span, "ok", nil)

	got := spans.GetSpans()
	require.Len(t, got, 2)
	a := map[attribute.Key]attribute.Value{}
	for _, kv := range got[0].Attributes {
		a[kv.Key] = kv.Value
	}
	require.Equal(t, "openai", a[tracing.AttrGenAISystem].AsString())
	require.Equal(t, "chat", a[tracing.AttrGenAIOperationName].AsString(), "the model call's operation over the agent call's")
	require.Equal(t, "gpt-x", a[tracing.AttrGenAIRequestModel].AsString())
	require.Equal(t, "gpt-x-2025", a[tracing.AttrGenAIResponseModel].AsString())
	require.Equal(t, int64(1200), a[tracing.AttrGenAIInputTokens].AsInt64())
	require.Equal(t, int64(345), a[tracing.AttrGenAIOutputTokens].AsInt64())
	require.Equal(t, "code", a[tracing.AttrGenAIAgentName].AsString())

	b := map[attribute.Key]bool{}
	for _, kv := range got[1].Attributes {
		b[kv.Key] = true
	}
	require.True(t, b[tracing.AttrGenAISystem])
	for _, k := range []attribute.Key{tracing.AttrGenAIRequestModel, tracing.AttrGenAIResponseModel, tracing.AttrGenAIInputTokens, tracing.AttrGenAIOutputTokens} {
		require.False(t, b[k], "%s: not said, not set", k)
	}

	// A span that does not record takes them without effect.
	_, off := noop.NewTracerProvider().Tracer("").Start(context.Background(), "x")
	tracing.GenAIRequest(off, "openai", "chat", "m")
	tracing.GenAIResponse(off, "m", 1, 1)
}

func TestMessagingProcess(t *testing.T) {
	t.Parallel()
	a := map[attribute.Key]string{}
	for _, kv := range tracing.MessagingProcess("saga.phase.3", "phase-3") {
		a[kv.Key] = kv.Value.AsString()
	}
	require.Equal(t, map[attribute.Key]string{
		"messaging.system": "nats", "messaging.operation.type": "process", "messaging.operation.name": "process",
		"messaging.destination.name": "saga.phase.3", "messaging.consumer.group.name": "phase-3",
	}, a)
	require.Len(t, tracing.MessagingProcess("saga.intake.p", ""), 4)
}
