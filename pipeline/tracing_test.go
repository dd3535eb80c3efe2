package pipeline_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/internal/tracing"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/schemas"
	"github.com/sagad/sagad/store"
)

// seenTraceparent is an executor that records the traceparent of each call
// it gets (what a worker would get in the header), then acts as the stub.
type seenTraceparent struct {
	mu   *sync.Mutex
	seen *[]string
}

func (s seenTraceparent) Execute(ctx context.Context, req executors.Request) (executors.Result, error) {
	s.mu.Lock()
	*s.seen = append(*s.seen, req.TraceParent)
	s.mu.Unlock()
	return executors.Stub{}.Execute(ctx, req)
}

func (s seenTraceparent) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), *s.seen...)
}

type tracedFixture struct {
	*fixture
	spans *tracetest.InMemoryExporter
	exec  seenTraceparent
}

// setupTraced is a pipeline whose spans go to an in-memory exporter (nil
// exporter: tracing off) and whose "traced" task kind records traceparents.
func setupTraced(t *testing.T, on bool) *tracedFixture {
	t.Helper()
	tf := &tracedFixture{exec: seenTraceparent{mu: new(sync.Mutex), seen: new([]string)}}
	if on {
		tf.spans = tracetest.NewInMemoryExporter()
	}
	tf.fixture = setupWith(t, func(cfg *pipeline.Config) {
		cfg.Executors.RegisterExecutor("traced", tf.exec)
		cfg.Rules.ExecutorKinds = nil // filled again from the registry
		if on {
			tp := tracing.NewProvider(sdktrace.WithSyncer(tf.spans))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			cfg.TracerProvider = tp
		}
	})
	return tf
}

// publishWith publishes raw on the intake subject with extra headers.
func (f *fixture) publishWith(t *testing.T, raw []byte, h map[string]string) {
	t.Helper()
	m := nats.NewMsg(store.IntakeSubject)
	m.Data = raw
	for k, v := range h {
		m.Header[k] = []string{v}
	}
	_, err := f.js.PublishMsg(context.Background(), m)
	require.NoError(t, err)
}

// spansOf waits for n ended spans of the capsule's trace and returns them.
func (tf *tracedFixture) spansOf(t *testing.T, tid trace.TraceID, n int) tracetest.SpanStubs {
	t.Helper()
	var got tracetest.SpanStubs
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		got = got[:0]
		for _, s := range tf.spans.GetSpans() {
			if s.SpanContext.TraceID() == tid {
				got = append(got, s)
			}
		}
		return len(got) >= n
	}, "want %d spans in trace %s", n, tid)
	return got
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func byName(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func TestTraceOfACapsule(t *testing.T) {
	t.Parallel()
	tf := setupTraced(t, true)
	doc := tf.own(t, capsuletest.New().Set("task.kind", "traced"))
	tf.publish(t, doc.Sealed(t))
	s := tf.wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)

	// The checkpoint names the trace: its trace_parent is the root span's
	// context, in the trace whose id is the checkpoint's trace_id.
	require.NotEmpty(t, s.TraceParent)
	root, err := tracing.ParseTraceparent(s.TraceParent)
	require.NoError(t, err)
	require.Equal(t, s.TraceID, root.TraceID().String())
	cp, err := tf.client.Checkpoint(context.Background(), doc.ID())
	require.NoError(t, err)
	require.Equal(t, s.TraceParent, cp.TraceParent)
	require.NoError(t, schemas.ValidateValue(schemas.Checkpoint, cp))

	// root + 7 phases + the executor and reviewer calls.
	spans := tf.spansOf(t, root.TraceID(), 10)
	require.Len(t, spans, 10, "one trace: %v", names(spans))
	roots := byName(spans, tracing.SpanCapsule)
	require.Len(t, roots, 1)
	require.Equal(t, root.SpanID(), roots[0].SpanContext.SpanID())
	require.False(t, roots[0].Parent.IsValid(), "no producer trace: the capsule's span is the root")
	require.Equal(t, doc.ID(), attrs(roots[0])[tracing.AttrCapsuleID].AsString())
	require.Equal(t, string(capsule.Completed), attrs(roots[0])[tracing.AttrOutcome].AsString())

	phaseSpan := map[string]tracetest.SpanStub{}
	for ph := capsule.Phase(0); ph < capsule.NumPhases; ph++ {
		got := byName(spans, tracing.SpanPhase+ph.String())
		require.Len(t, got, 1, "phase %s", ph)
		sp := got[0]
		phaseSpan[ph.String()] = sp
		require.Equal(t, root.SpanID(), sp.Parent.SpanID(), "phase %s descends from the capsule's span", ph)
		require.False(t, sp.StartTime.Before(roots[0].StartTime) || sp.EndTime.After(roots[0].EndTime),
			"the capsule's span (%v–%v) covers phase %s (%v–%v)", roots[0].StartTime, roots[0].EndTime, ph, sp.StartTime, sp.EndTime)
		a := attrs(sp)
		require.Equal(t, doc.ID(), a[tracing.AttrCapsuleID].AsString())
		require.Equal(t, ph.String(), a[tracing.AttrPhase].AsString())
		wantCycle := int64(1)
		if ph < capsule.Execution {
			wantCycle = 0
		}
		require.Equal(t, wantCycle, a[tracing.AttrCycle].AsInt64(), "phase %s", ph)
		if ph > capsule.Reception {
			// OpenTelemetry's messaging conventions: the phase
			// processed one NATS message of its stream's consumer.
			require.Equal(t, "nats", a[tracing.AttrMessagingSystem].AsString(), "phase %s", ph)
			require.Equal(t, "process", a[tracing.AttrMessagingOperationType].AsString())
			require.Equal(t, store.PhaseSubject(ph), a[tracing.AttrMessagingDestination].AsString())
			require.Equal(t, store.ConsumerName(ph), a[tracing.AttrMessagingConsumerGroup].AsString())
			require.Equal(t, "consumer", sp.SpanKind.String())
		}
		want := capsule.OutcomePassed
		switch ph {
		case capsule.Handoff:
			want = capsule.OutcomeCompleted
		case capsule.RealityAnchor:
			want = "forwarded" // decided by EXECUTION's catch-up
		}
		require.Equal(t, want, a[tracing.AttrOutcome].AsString(), "phase %s", ph)
	}

	exec := byName(spans, tracing.SpanCallPrefix+"execute traced")
	require.Len(t, exec, 1, "spans: %v", names(spans))
	require.Equal(t, phaseSpan["EXECUTION"].SpanContext.SpanID(), exec[0].Parent.SpanID())
	require.Equal(t, trace.SpanKindClient, exec[0].SpanKind)
	a := attrs(exec[0])
	require.Equal(t, "ok", a[tracing.AttrOutcome].AsString())
	require.Equal(t, doc.ID(), a[tracing.AttrCapsuleID].AsString())
	require.Equal(t, int64(1), a[tracing.AttrCycle].AsInt64())

	review := byName(spans, tracing.SpanCallPrefix+"review "+executors.StubReviewerID)
	require.Len(t, review, 1)
	require.Equal(t, phaseSpan["REVIEW"].SpanContext.SpanID(), review[0].Parent.SpanID())
	require.Equal(t, "ok", attrs(review[0])[tracing.AttrOutcome].AsString())

	// The worker got the traceparent of its call's span.
	require.Equal(t, []string{tracing.FormatTraceparent(exec[0].SpanContext)}, tf.exec.got())
}

func names(spans tracetest.SpanStubs) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name
	}
	return out
}

func TestTraceHaltRecordsReason(t *testing.T) {
	t.Parallel()
	tf := setupTraced(t, true)
	// A deadline in the past halts at RECEPTION.
	doc := tf.own(t, capsuletest.New().Set("deadline", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)))
	tf.publish(t, doc.Sealed(t))
	cp := waitCheckpoint(t, tf.fixture, func(cp *capsule.Checkpoint) bool { return cp.State.Status == capsule.Halted })
	root, err := tracing.ParseTraceparent(cp.TraceParent)
	require.NoError(t, err)
	spans := tf.spansOf(t, root.TraceID(), 2)
	rec := byName(spans, tracing.SpanPhase+"RECEPTION")
	require.Len(t, rec, 1)
	a := attrs(rec[0])
	require.Equal(t, capsule.OutcomeHalted, a[tracing.AttrOutcome].AsString())
	require.Equal(t, cp.State.HaltReason, a[tracing.AttrHaltReason].AsString())
	require.NotEmpty(t, cp.State.HaltReason)
}

// waitCheckpoint waits for the only capsule's checkpoint to satisfy ok
// (a capsule halted at RECEPTION is kept under its intake sequence).
func waitCheckpoint(t *testing.T, f *fixture, ok func(*capsule.Checkpoint) bool) *capsule.Checkpoint {
	t.Helper()
	var got *capsule.Checkpoint
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		cps, err := f.pipe.Checkpoints().List(context.Background())
		if err != nil || len(cps) != 1 || !ok(cps[0]) {
			return false
		}
		got = cps[0]
		return true
	}, "no checkpoint as wanted")
	return got
}

func TestTraceContinuesTheProducersTrace(t *testing.T) {
	t.Parallel()
	tf := setupTraced(t, true)
	const producer = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	doc := tf.own(t, capsuletest.New())
	tf.publishWith(t, doc.Sealed(t), map[string]string{"traceparent": producer})
	s := tf.wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State)
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", s.TraceID)
	root, err := tracing.ParseTraceparent(s.TraceParent)
	require.NoError(t, err)
	cp, err := tf.client.Checkpoint(context.Background(), doc.ID())
	require.NoError(t, err)
	require.Equal(t, "b7ad6b7169203331", cp.TraceProducerSpan, "stored, for whichever sagad records the capsule's end")
	require.NoError(t, schemas.ValidateValue(schemas.Checkpoint, cp))
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", root.TraceID().String())
	require.NotEqual(t, "b7ad6b7169203331", root.SpanID().String(), "the capsule has a span of its own")

	spans := tf.spansOf(t, root.TraceID(), 10)
	roots := byName(spans, tracing.SpanCapsule)
	require.Len(t, roots, 1)
	require.Equal(t, "b7ad6b7169203331", roots[0].Parent.SpanID().String(), "a child of the producer's span")
	require.True(t, roots[0].Parent.IsRemote())
	require.Len(t, byName(spans, tracing.SpanPhase+"HANDOFF"), 1)
}

func TestTraceIgnoresAMalformedTraceparent(t *testing.T) {
	t.Parallel()
	tf := setupTraced(t, true)
	for _, bad := range []string{
		"00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01", // upper case
		"00-00000000000000000000000000000000-b7ad6b7169203331-01", // zero trace id
		"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", // version ff
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",    // no flags
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",
		"not a traceparent",
	} {
		doc := tf.own(t, capsuletest.New())
		tf.publishWith(t, doc.Sealed(t), map[string]string{"traceparent": bad})
		s := tf.wait(t, doc.ID())
		require.Equal(t, capsule.Completed, s.State, "traceparent %q", bad)
		require.NotContains(t, strings.ToLower(bad), s.TraceID, "traceparent %q", bad)
		root, err := tracing.ParseTraceparent(s.TraceParent)
		require.NoError(t, err)
		require.Equal(t, s.TraceID, root.TraceID().String())
		spans := tf.spansOf(t, root.TraceID(), 10)
		roots := byName(spans, tracing.SpanCapsule)
		require.Len(t, roots, 1)
		require.False(t, roots[0].Parent.IsValid(), "traceparent %q", bad)
	}
}

func TestTraceparentReachesWorkersWithTracingOff(t *testing.T) {
	t.Parallel()
	tf := setupTraced(t, false)
	doc := tf.own(t, capsuletest.New().Set("task.kind", "traced"))
	tf.publish(t, doc.Sealed(t))
	s := tf.wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State)
	root, err := tracing.ParseTraceparent(s.TraceParent)
	require.NoError(t, err)
	require.Equal(t, s.TraceID, root.TraceID().String())
	require.True(t, root.IsSampled())
	// No spans are recorded, so the worker continues the capsule's root.
	require.Equal(t, []string{s.TraceParent}, tf.exec.got())
}

// TestTraceOffContinuesTheProducersTrace: with tracing off RECEPTION makes
// the capsule's traceparent without a span context (CapsuleTraceparent),
// as StartCapsule made it: in the producer's trace with its flags (here
// not sampled), even when the capsule names a trace id of its own, with a
// span id of its own, and the producer's span kept for the capsule's end;
// the worker gets that traceparent.
func TestTraceOffContinuesTheProducersTrace(t *testing.T) {
	t.Parallel()
	tf := setupTraced(t, false)
	const producer = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	doc := tf.own(t, capsuletest.New().Set("task.kind", "traced").Set("trace_id", "ticket-4711"))
	tf.publishWith(t, doc.Sealed(t), map[string]string{"traceparent": producer})
	s := tf.wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State)
	require.Equal(t, "ticket-4711", s.TraceID)
	root, err := tracing.ParseTraceparent(s.TraceParent)
	require.NoError(t, err)
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", root.TraceID().String())
	require.False(t, root.IsSampled(), "the producer's flags")
	require.NotEqual(t, "b7ad6b7169203331", root.SpanID().String(), "the capsule has a span id of its own")
	cp, err := tf.client.Checkpoint(context.Background(), doc.ID())
	require.NoError(t, err)
	require.Equal(t, "b7ad6b7169203331", cp.TraceProducerSpan)
	require.Equal(t, []string{s.TraceParent}, tf.exec.got())
}

func TestTraceOfAProducerTraceIDThatIsNoW3CID(t *testing.T) {
	t.Parallel()
	tf := setupTraced(t, true)
	doc := tf.own(t, capsuletest.New().Set("trace_id", "ticket-4711"))
	tf.publish(t, doc.Sealed(t))
	s := tf.wait(t, doc.ID())
	require.Equal(t, "ticket-4711", s.TraceID)
	root, err := tracing.ParseTraceparent(s.TraceParent)
	require.NoError(t, err)
	want, _ := tracing.TraceIDOf("ticket-4711")
	require.Equal(t, want, root.TraceID(), "derived from the producer's id: capsules sharing it share a trace")
	tf.spansOf(t, want, 10)
}

// TestTraceRootCoversACancelledCapsule: a capsule an operator cancels while
// it waits at the gate gets its root span then, from its arrival, covering
// its phases, with outcome cancelled; a capsule still running has none yet.
func TestTraceRootCoversACancelledCapsule(t *testing.T) {
	t.Parallel()
	tf := setupTraced(t, true)
	doc := tf.own(t, capsuletest.New().Set("review.operator_gate", true))
	tf.publish(t, doc.Sealed(t))
	s := tf.waitState(t, doc.ID(), capsule.WaitingForOperator)
	root, err := tracing.ParseTraceparent(s.TraceParent)
	require.NoError(t, err)
	// Every phase up to REVIEW, and no root yet.
	phases := tf.spansOf(t, root.TraceID(), 8)
	require.Empty(t, byName(phases, tracing.SpanCapsule), "the root is recorded at the end")

	_, err = tf.pipe.Admin().Cancel(context.Background(), doc.ID(), "not needed", "ann")
	require.NoError(t, err)
	var roots []tracetest.SpanStub
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		roots = byName(tf.spansOf(t, root.TraceID(), 1), tracing.SpanCapsule)
		return len(roots) == 1
	}, "no root span after the cancel")
	r := roots[0]
	require.Equal(t, root.SpanID(), r.SpanContext.SpanID())
	require.Equal(t, string(capsule.Cancelled), attrs(r)[tracing.AttrOutcome].AsString())
	for _, sp := range phases {
		require.False(t, sp.StartTime.Before(r.StartTime) || sp.EndTime.After(r.EndTime), "root covers %s", sp.Name)
	}
}
