// Package tracing is sagad's OpenTelemetry tracing: its setup from flags and
// the standard OTEL_* environment, the W3C traceparent it reads from
// producers and passes to workers, and the spans of a capsule's trace.
//
// A capsule's phases run in different messages, maybe in different sagads,
// so no process holds a span from the capsule's start to its end. RECEPTION
// chooses the capsule's root span context (a child of the producer's span
// when the intake message carried a valid traceparent) and records it in the
// checkpoint (trace_parent, and the producer's span id in
// trace_producer_span); every phase span is a child of that context, read
// back from the checkpoint, and every agent call is a child of its phase's
// span. The root span itself is recorded once, by the sagad that records the
// capsule's end ([Tracer.EndCapsule]): it takes the span id the phases
// already name, starts at the capsule's arrival and ends with it, so it
// covers every phase. The root span's trace id is the checkpoint's trace_id when that is a
// W3C trace id (sagad makes one when the producer gave none), so the trace id
// `sagactl status` shows is the one to look up in the tracing backend.
//
// Tracing is off unless an endpoint is configured; then the tracer is a
// no-op and costs a few allocations per phase, but the traceparent stored at
// RECEPTION still reaches workers, so their own traces stay connected.
package tracing

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ServiceName is the service.name of sagad's spans unless OTEL_SERVICE_NAME
// (or service.name in OTEL_RESOURCE_ATTRIBUTES) says otherwise.
const ServiceName = "sagad"

// InstrumentationName names sagad's tracer.
const InstrumentationName = "github.com/sagad/sagad"

// Environment variables of the OpenTelemetry specification that decide
// whether tracing is on. The exporter reads the other OTEL_EXPORTER_OTLP_*
// variables (headers, timeout, certificates, compression) itself, and the
// SDK reads OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES and OTEL_BSP_*.
const (
	EnvSDKDisabled          = "OTEL_SDK_DISABLED"
	EnvEndpoint             = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint       = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvTracesExporter       = "OTEL_TRACES_EXPORTER"
	EnvExporterOTLPProtocol = "OTEL_EXPORTER_OTLP_PROTOCOL"
)

// ValidateEndpoint checks an --otel-endpoint value: an http or https URL
// with a host, as OTLP/HTTP wants ("http://localhost:4318"). Like
// OTEL_EXPORTER_OTLP_ENDPOINT it is a base URL (see [TracesURL]).
func ValidateEndpoint(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("otel endpoint %q: want an http or https URL such as http://localhost:4318", s)
	}
	return nil
}

// TracesURL is where spans are posted for the --otel-endpoint value
// endpoint: like OTEL_EXPORTER_OTLP_ENDPOINT, a base URL to which
// /v1/traces is appended, unless it already ends so.
func TracesURL(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || strings.HasSuffix(u.Path, "/v1/traces") {
		return endpoint
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	return u.String()
}

// Enabled says whether tracing is on for the --otel-endpoint value endpoint
// and the environment getenv, and why not when it is off.
func Enabled(endpoint string, getenv func(string) string) (bool, string) {
	if v, _ := strconv.ParseBool(strings.TrimSpace(getenv(EnvSDKDisabled))); v {
		return false, EnvSDKDisabled + " is true"
	}
	if strings.EqualFold(strings.TrimSpace(getenv(EnvTracesExporter)), "none") {
		return false, EnvTracesExporter + " is none"
	}
	if endpoint == "" && getenv(EnvEndpoint) == "" && getenv(EnvTracesEndpoint) == "" {
		return false, "no endpoint (--otel-endpoint, " + EnvEndpoint + ")"
	}
	return true, ""
}

// Setup returns the tracer provider sagad uses: a no-op one when tracing is
// off (see [Enabled]), else an SDK provider that batches spans to an
// OTLP/HTTP exporter. shutdown flushes and stops it (a no-op when off).
// version is the service.version resource attribute.
func Setup(ctx context.Context, endpoint, version string, getenv func(string) string) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	off := func(context.Context) error { return nil }
	if on, _ := Enabled(endpoint, getenv); !on {
		return noop.NewTracerProvider(), off, nil
	}
	if err := ValidateEndpoint(endpoint); err != nil {
		return nil, off, err
	}
	if p := strings.TrimSpace(getenv(EnvExporterOTLPProtocol)); p != "" && p != "http/protobuf" {
		// Only OTLP over HTTP is linked in; say so rather than send
		// protobuf to a gRPC port.
		return nil, off, fmt.Errorf("%s=%s: sagad exports OTLP over HTTP only (http/protobuf, port 4318)", EnvExporterOTLPProtocol, p)
	}
	var opts []otlptracehttp.Option
	if endpoint != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(TracesURL(endpoint)))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, off, fmt.Errorf("tracing: exporter: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", ServiceName), attribute.String("service.instance.id", InstanceID())}
	if version != "" {
		attrs = append(attrs, attribute.String("service.version", version))
	}
	// Later options win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// override sagad's defaults.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(attrs...), resource.WithFromEnv())
	if err != nil && res == nil {
		return nil, off, fmt.Errorf("tracing: resource: %w", err)
	}
	sdk := NewProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return sdk, sdk.Shutdown, nil
}

// InstanceID is this process's service.instance.id: a random UUID made
// once per process, as the OpenTelemetry conventions advise when nothing
// stable names the instance (two sagads on one host, a restarted one, are
// told apart). OTEL_RESOURCE_ATTRIBUTES may set another.
var InstanceID = sync.OnceValue(func() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
})

// LogErrors sends the OpenTelemetry SDK's errors (an export the collector
// refused or that timed out) to log instead of the standard logger's
// stderr. It sets the SDK's process-wide error handler.
func LogErrors(log *slog.Logger) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: export failed", "error", err)
	}))
}

// NewProvider is an SDK tracer provider with sagad's id generator (see
// [WithTraceID]); tests pass it an in-memory exporter.
func NewProvider(opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{sdktrace.WithIDGenerator(idGenerator{})}, opts...)...)
}

type traceIDKey struct{}

type spanIDKey struct{}

// withSpanID makes the next span started with ctx take span id sid, on a
// provider made by [NewProvider]: the capsule's span, recorded when the
// capsule ends, takes the id its phases already name as their parent.
func withSpanID(ctx context.Context, sid trace.SpanID) context.Context {
	return context.WithValue(ctx, spanIDKey{}, sid)
}

func spanIDOf(ctx context.Context) trace.SpanID {
	if sid, ok := ctx.Value(spanIDKey{}).(trace.SpanID); ok && sid.IsValid() {
		return sid
	}
	return randomSpanID()
}

// WithTraceID makes the next root span started with ctx (one without a
// parent) take trace id tid, on a provider made by [NewProvider]. RECEPTION
// uses it so that a capsule's trace id is its checkpoint's trace_id.
func WithTraceID(ctx context.Context, tid trace.TraceID) context.Context {
	return context.WithValue(ctx, traceIDKey{}, tid)
}

// idGenerator makes random ids, except the trace id forced by WithTraceID.
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	tid, ok := ctx.Value(traceIDKey{}).(trace.TraceID)
	if !ok || !tid.IsValid() {
		tid = randomTraceID()
	}
	return tid, spanIDOf(ctx)
}

func (idGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID { return spanIDOf(ctx) }

func randomTraceID() trace.TraceID {
	var tid trace.TraceID
	for !tid.IsValid() {
		hi, lo := rand.Uint64(), rand.Uint64()
		for i := range 8 {
			tid[i], tid[8+i] = byte(hi>>(56-8*i)), byte(lo>>(56-8*i))
		}
	}
	return tid
}

func randomSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		v := rand.Uint64()
		for i := range 8 {
			sid[i] = byte(v >> (56 - 8*i))
		}
	}
	return sid
}
