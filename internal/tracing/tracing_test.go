package tracing_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sagad/sagad/internal/differential"
	"github.com/sagad/sagad/internal/tracing"
)

const valid = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

func TestParseTraceparent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		ok      bool
		sampled bool
	}{
		{valid, true, true},
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", true, false},
		{"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-future", true, true}, // a later version may add fields
		{"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", true, true},
		{"", false, false},
		{"garbage", false, false},
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-", false, false}, // version 00 is exactly 55
		{"00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01", false, false},  // upper case
		{"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", false, false},
		{"00-00000000000000000000000000000000-b7ad6b7169203331-01", false, false},
		{"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", false, false},
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333g-01", false, false},
		{"00_0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331_01", false, false},
		{"00-0af7651916cd43dd8448eb211c80319-cb7ad6b7169203331-01", false, false},
		{"0x-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", false, false},
		{"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x", false, false},
	} {
		sc, err := tracing.ParseTraceparent(tc.in)
		if !tc.ok {
			require.ErrorIs(t, err, tracing.ErrMalformedTraceparent, "%q", tc.in)
			require.Empty(t, tracing.TraceIDOfTraceparent(tc.in))
			continue
		}
		require.NoError(t, err, "%q", tc.in)
		require.True(t, sc.IsRemote())
		require.Equal(t, "0af7651916cd43dd8448eb211c80319c", sc.TraceID().String())
		require.Equal(t, "b7ad6b7169203331", sc.SpanID().String())
		require.Equal(t, tc.sampled, sc.IsSampled(), "%q", tc.in)
		require.Equal(t, "0af7651916cd43dd8448eb211c80319c", tracing.TraceIDOfTraceparent(tc.in))
	}
}

func TestFormatTraceparent(t *testing.T) {
	t.Parallel()
	sc, err := tracing.ParseTraceparent(valid)
	require.NoError(t, err)
	require.Equal(t, valid, tracing.FormatTraceparent(sc))
	require.Empty(t, tracing.FormatTraceparent(trace.SpanContext{}))
	require.Empty(t, tracing.Traceparent(context.Background()))
}

// validTraceparentPair holds ValidTraceparent to the parser: over
// traceparents valid and a byte, a dash or a length away from valid, every
// version, and all-zero ids. Whatever parses is a valid context and
// formats back to its version-00 form, which parses to the same.
var validTraceparentPair = differential.Pair[string, bool]{
	Name: "ValidTraceparent",
	Fast: func(s string) (bool, error) { return tracing.ValidTraceparent(s), nil },
	Reference: func(s string) (bool, error) {
		_, err := tracing.ParseTraceparent(s)
		return err == nil, nil
	},
	Compare: func(t testing.TB, s string, fast, ref bool) {
		require.Equal(t, ref, fast, "ValidTraceparent disagrees with the parser on %q", s)
		if !ref {
			return
		}
		sc, err := tracing.ParseTraceparent(s)
		require.NoError(t, err)
		require.True(t, sc.IsValid())
		back, err := tracing.ParseTraceparent(tracing.FormatTraceparent(sc))
		require.NoError(t, err)
		require.Equal(t, sc, back)
	},
	Seeds: []string{"", valid, "00-00000000000000000000000000000000-b7ad6b7169203331-01",
		"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-more", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-more",
		"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01more", "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x"},
	Generate: nearTraceparent,
	Count:    20000,
	Decode:   func(b []byte) (string, bool) { return string(b), true },
	Encode:   func(s string) []byte { return []byte(s) },
}

func TestDifferential(t *testing.T) {
	t.Parallel()
	differential.RunAll(t, differential.Registry{validTraceparentPair})
}

func FuzzParseTraceparent(f *testing.F) { differential.Fuzz(f, validTraceparentPair) }

// nearTraceparent is a random traceparent, mostly of version 00 or ff,
// sometimes with an all-zero id, then changed by up to two bytes replaced,
// cut or added.
func nearTraceparent(rng *rand.Rand) string {
	const alphabet = "0123456789abcdefABF-xz"
	b := []byte(valid)
	for i := range b {
		if b[i] != '-' {
			b[i] = "0123456789abcdef"[rng.IntN(16)]
		}
	}
	if rng.IntN(4) == 0 { // the version's digits are where the rules differ
		b[0], b[1] = "0f"[rng.IntN(2)], "0f1"[rng.IntN(3)]
	}
	if rng.IntN(8) == 0 { // an all-zero id
		lo, hi := 3, 35
		if rng.IntN(2) == 0 {
			lo, hi = 36, 52
		}
		for i := lo; i < hi; i++ {
			b[i] = '0'
		}
	}
	for range rng.IntN(3) {
		switch rng.IntN(3) {
		case 0:
			if len(b) > 0 {
				b[rng.IntN(len(b))] = alphabet[rng.IntN(len(alphabet))]
			}
		case 1:
			b = b[:rng.IntN(len(b)+1)]
		case 2:
			b = append(b, alphabet[rng.IntN(len(alphabet))])
		}
	}
	return string(b)
}

func TestTraceIDOf(t *testing.T) {
	t.Parallel()
	tid, ok := tracing.TraceIDOf("0af7651916cd43dd8448eb211c80319c")
	require.True(t, ok)
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", tid.String(), "a W3C trace id is kept")
	a, ok := tracing.TraceIDOf("ticket-4711")
	require.True(t, ok)
	require.True(t, a.IsValid())
	b, _ := tracing.TraceIDOf("ticket-4711")
	require.Equal(t, a, b, "derived ids are stable")
	c, _ := tracing.TraceIDOf("ticket-4712")
	require.NotEqual(t, a, c)
	z, _ := tracing.TraceIDOf("00000000000000000000000000000000")
	require.True(t, z.IsValid(), "an all-zero id is no trace id: derived")
	_, ok = tracing.TraceIDOf("")
	require.False(t, ok)
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestEnabled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		endpoint string
		env      map[string]string
		on       bool
	}{
		{"nothing", "", nil, false},
		{"flag", "http://localhost:4318", nil, true},
		{"env endpoint", "", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true},
		{"env traces endpoint", "", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true},
		{"sdk disabled wins over flag", "http://localhost:4318", map[string]string{"OTEL_SDK_DISABLED": "true"}, false},
		{"sdk disabled false", "http://localhost:4318", map[string]string{"OTEL_SDK_DISABLED": "false"}, true},
		{"exporter none", "", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
		{"sampler alone is not an endpoint", "", map[string]string{"OTEL_TRACES_SAMPLER": "always_on"}, false},
	} {
		on, why := tracing.Enabled(tc.endpoint, env(tc.env))
		require.Equal(t, tc.on, on, tc.name)
		require.Equal(t, !tc.on, why != "", tc.name)
	}
}

func TestValidateEndpoint(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"", "http://localhost:4318", "https://otel.example.com", "http://c:4318/custom/v1/traces"} {
		require.NoError(t, tracing.ValidateEndpoint(ok), ok)
	}
	for _, bad := range []string{"localhost:4318", "grpc://c:4317", "http://", "::"} {
		require.Error(t, tracing.ValidateEndpoint(bad), bad)
	}
}

func TestSetup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tp, stop, err := tracing.Setup(ctx, "", "", env(nil))
	require.NoError(t, err)
	require.IsType(t, noop.TracerProvider{}, tp, "off by default")
	require.NoError(t, stop(ctx))

	tp, stop, err = tracing.Setup(ctx, "http://127.0.0.1:1", "v1.2.3", env(map[string]string{"OTEL_SERVICE_NAME": "sagad-eu"}))
	require.NoError(t, err)
	sdk, ok := tp.(*sdktrace.TracerProvider)
	require.True(t, ok, "on with an endpoint")
	// Nothing listens there: shutting down must not hang past its context.
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_ = stop(sctx)
	_ = sdk

	_, _, err = tracing.Setup(ctx, "localhost:4318", "", env(nil))
	require.Error(t, err, "not a URL")
	_, _, err = tracing.Setup(ctx, "", "", env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}))
	require.ErrorContains(t, err, "OTLP over HTTP only")
}

func TestStartCapsuleWithoutSDK(t *testing.T) {
	t.Parallel()
	tr := tracing.New(nil)
	c := tracing.Capsule{ID: "c1", Key: "c1"}
	// No producer context: the trace id is the checkpoint's.
	ctx, span, tp := tr.StartCapsule(context.Background(), "", "0af7651916cd43dd8448eb211c80319c", c, time.Now())
	span.End()
	sc, err := tracing.ParseTraceparent(tp)
	require.NoError(t, err)
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", sc.TraceID().String())
	require.True(t, sc.IsSampled())
	require.Equal(t, tp, tracing.Traceparent(ctx))

	// A producer's: its trace and flags, a span id of the capsule's own.
	_, _, tp = tr.StartCapsule(context.Background(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", "other", c, time.Now())
	sc, err = tracing.ParseTraceparent(tp)
	require.NoError(t, err)
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", sc.TraceID().String())
	require.NotEqual(t, "b7ad6b7169203331", sc.SpanID().String())
	require.False(t, sc.IsSampled(), "the producer's sampling decision holds")

	// A phase span in a later message descends from it.
	pctx, ps := tr.StartPhase(context.Background(), tp, "other", c, "PLANNING", 0)
	ps.End()
	require.Equal(t, tp, tracing.Traceparent(pctx))
}

func TestStartCapsuleWithSDK(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewInMemoryExporter()
	tp := tracing.NewProvider(sdktrace.WithSyncer(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tracing.New(tp)
	c := tracing.Capsule{ID: "c1", Key: "c1", WaveID: "w"}
	arrived := time.Now().Add(-time.Minute)
	_, root, parent := tr.StartCapsule(context.Background(), "", "0af7651916cd43dd8448eb211c80319c", c, arrived)
	require.False(t, root.IsRecording(), "the root span is recorded when the capsule ends")
	_, ps := tr.StartPhase(context.Background(), parent, "", c, "PLANNING", 0)
	tracing.EndPhase(ps, "halted", "spec_not_approved", "", nil)
	ended := time.Now()
	tr.EndCapsule(context.Background(), parent, "", c, arrived, ended, "halted", "spec_not_approved")
	got := spans.GetSpans()
	require.Len(t, got, 2)
	require.Equal(t, "phase PLANNING", got[0].Name)
	require.Equal(t, "Error", got[0].Status.Code.String())
	require.Equal(t, tracing.SpanCapsule, got[1].Name)
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", got[1].SpanContext.TraceID().String(), "forced trace id")
	require.Equal(t, parent, tracing.FormatTraceparent(got[1].SpanContext), "the id the phases name")
	require.Equal(t, got[1].SpanContext.SpanID(), got[0].Parent.SpanID())
	require.False(t, got[1].Parent.IsValid())
	require.True(t, got[1].StartTime.Equal(arrived) && got[1].EndTime.Equal(ended), "from arrival to end: %v–%v", got[1].StartTime, got[1].EndTime)
	require.False(t, got[1].StartTime.After(got[0].StartTime) || got[1].EndTime.Before(got[0].EndTime), "the root covers its phases")

	// With a producer's span: the root is its child.
	_, _, parent2 := tr.StartCapsule(context.Background(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "", c, arrived)
	tr.EndCapsule(context.Background(), parent2, tracing.ProducerSpan("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), c, arrived, ended, "completed", "")
	got = spans.GetSpans()
	require.Len(t, got, 3)
	require.Equal(t, "b7ad6b7169203331", got[2].Parent.SpanID().String())
	require.Equal(t, parent2, tracing.FormatTraceparent(got[2].SpanContext))
	spans.Reset()

	// An old checkpoint (no trace_parent): a root in the trace of its trace_id.
	_, ps = tr.StartPhase(context.Background(), "", "0af7651916cd43dd8448eb211c80319c", c, "REVIEW", 1)
	ps.End()
	got = spans.GetSpans()
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", got[0].SpanContext.TraceID().String())
	require.False(t, got[0].Parent.IsValid())
}

func TestTracesURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://localhost:4318":                "http://localhost:4318/v1/traces",
		"http://localhost:4318/":               "http://localhost:4318/v1/traces",
		"https://c.example.com/otlp":           "https://c.example.com/otlp/v1/traces",
		"http://c:4318/v1/traces":              "http://c:4318/v1/traces",
		"https://c.example.com/otlp/v1/traces": "https://c.example.com/otlp/v1/traces",
	} {
		require.Equal(t, want, tracing.TracesURL(in), in)
	}
}

// BenchmarkPhaseSpan is what tracing adds to one phase run with one agent
// call: the phase span under the checkpoint's trace_parent, the call span,
// the traceparent for the worker. off is sagad's default (no-op tracer).
func BenchmarkPhaseSpan(b *testing.B) {
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	c := tracing.Capsule{ID: "de300000-0000-4000-8000-000000000001", Key: "de300000-0000-4000-8000-000000000001"}
	run := func(b *testing.B, tr *tracing.Tracer) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, ps := tr.StartPhase(context.Background(), parent, "", c, "EXECUTION", 1)
			cctx, cs := tr.StartCall(ctx, "execute", "stub", c.ID, 1)
			if tracing.Traceparent(cctx) == "" {
				b.Fatal("no traceparent")
			}
			tracing.EndCall(cs, "ok", nil)
			tracing.EndPhase(ps, "passed", "", "", nil)
		}
	}
	b.Run("off", func(b *testing.B) { run(b, tracing.New(nil)) })
	b.Run("on", func(b *testing.B) {
		// A batcher to an exporter that drops: the SDK's own cost.
		tp := tracing.NewProvider(sdktrace.WithBatcher(discard{}))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		run(b, tracing.New(tp))
	})
}

type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// TestOff: a tracer without a provider (or with the no-op one) records
// nothing, one with the SDK's does.
func TestOff(t *testing.T) {
	t.Parallel()
	require.True(t, tracing.New(nil).Off())
	require.True(t, (*tracing.Tracer)(nil).Off())
	tp := tracing.NewProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	require.False(t, tracing.New(tp).Off())
}

// TestCapsuleTraceparent: the traceparent RECEPTION keeps when nothing
// records is StartCapsule's, span id aside (a random one each): the same
// trace id and flags from a producer's traceparent, a checkpoint's trace id
// (a W3C one or one to derive from), or none.
func TestCapsuleTraceparent(t *testing.T) {
	t.Parallel()
	tr := tracing.New(nil)
	c := tracing.Capsule{ID: "c1", Key: "c1"}
	for _, incoming := range []string{"", valid, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", "00-bad", "00-00000000000000000000000000000000-b7ad6b7169203331-01"} {
		for _, traceID := range []string{"", "0af7651916cd43dd8448eb211c80319c", "other", "0AF7651916CD43DD8448EB211C80319C"} {
			_, _, want := tr.StartCapsule(context.Background(), incoming, traceID, c, time.Now())
			got := tracing.CapsuleTraceparent(incoming, traceID)
			wsc, err := tracing.ParseTraceparent(want)
			require.NoError(t, err)
			gsc, err := tracing.ParseTraceparent(got)
			require.NoError(t, err, "%q %q", incoming, traceID)
			require.Equal(t, wsc.TraceFlags(), gsc.TraceFlags(), "%q %q", incoming, traceID)
			if traceID != "" || tracing.ValidTraceparent(incoming) { // else a random trace id
				require.Equal(t, want[:36], got[:36], "%q %q", incoming, traceID)
			}
			require.Len(t, got, 55)
		}
	}
}

// BenchmarkCapsuleTraceparent: RECEPTION's traceparent with a context made
// (StartCapsule) and without (CapsuleTraceparent, tracing off).
func BenchmarkCapsuleTraceparent(b *testing.B) {
	c := tracing.Capsule{ID: "de300000-0000-4000-8000-000000000001", Key: "de300000-0000-4000-8000-000000000001"}
	tr := tracing.New(nil)
	b.Run("StartCapsule", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, tp := tr.StartCapsule(context.Background(), "", "0af7651916cd43dd8448eb211c80319c", c, time.Time{}); tp == "" {
				b.Fatal("no traceparent")
			}
		}
	})
	b.Run("CapsuleTraceparent", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if tracing.CapsuleTraceparent("", "0af7651916cd43dd8448eb211c80319c") == "" {
				b.Fatal("no traceparent")
			}
		}
	})
}
