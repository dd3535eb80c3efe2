package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Attribute keys of sagad's spans.
const (
	AttrCapsuleID  = attribute.Key("saga.capsule_id")
	AttrCapsuleKey = attribute.Key("saga.capsule_key")
	AttrWaveID     = attribute.Key("saga.wave_id")
	AttrPhase      = attribute.Key("saga.phase")
	AttrCycle      = attribute.Key("saga.cycle")
	// AttrOutcome is a phase's outcome (passed, looped_back, halted,
	// completed, parked, retry) or an agent call's (ok, accepted, failed,
	// human_input, error).
	AttrOutcome    = attribute.Key("saga.outcome")
	AttrHaltReason = attribute.Key("saga.halt_reason")
	AttrTrigger    = attribute.Key("saga.pause_trigger")
	// AttrCall is execute or review; AttrAgent the task kind or reviewer id.
	AttrCall  = attribute.Key("saga.call")
	AttrAgent = attribute.Key("saga.agent")
)

// Span names.
const (
	SpanCapsule    = "capsule"
	SpanPhase      = "phase " // + the phase's name: "phase EXECUTION"
	SpanCallPrefix = "agent " // + call kind and agent: "agent execute stub"
)

// Tracer starts sagad's spans. The zero value and nil are no-ops.
type Tracer struct {
	t trace.Tracer
}

// New returns the tracer of tp; nil tp is a no-op tracer.
func New(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return &Tracer{t: tp.Tracer(InstrumentationName)}
}

func (t *Tracer) tracer() trace.Tracer {
	if t == nil || t.t == nil {
		return noop.Tracer{}
	}
	return t.t
}

// Off reports whether nothing records: every span a Start method returns
// is then the context's own, and no span in a phase's context records.
func (t *Tracer) Off() bool { return isNoop(t.tracer()) }

func isNoop(tr trace.Tracer) bool {
	_, off := tr.(noop.Tracer)
	return off
}

// Capsule is what a span says about its capsule.
type Capsule struct {
	ID, Key, WaveID string
}

func (c Capsule) attrs(extra ...attribute.KeyValue) []attribute.KeyValue {
	a := make([]attribute.KeyValue, 0, 3+len(extra))
	a = append(a, AttrCapsuleID.String(c.ID), AttrCapsuleKey.String(c.Key))
	if c.WaveID != "" {
		a = append(a, AttrWaveID.String(c.WaveID))
	}
	return append(a, extra...)
}

// StartCapsule chooses a capsule's root span context at RECEPTION and
// returns a context holding it with its traceparent, which the checkpoint
// keeps (trace_parent) for every phase span to descend from. The span is
// recorded when the capsule ends ([Tracer.EndCapsule]), under the same id.
//
// incoming is the intake message's traceparent header: when it is valid the
// capsule's trace continues the producer's (the root span is a child of the
// producer's span, its sampling decision holds); a malformed one is
// ignored. Otherwise the trace id is TraceIDOf(traceID), the checkpoint's
// trace_id. With a no-op provider the span context is made all the same,
// so the traceparent sent to workers names the capsule's trace.
func (t *Tracer) StartCapsule(ctx context.Context, incoming, traceID string, c Capsule, start time.Time) (context.Context, trace.Span, string) {
	sc := capsuleSpanContext(incoming, traceID)
	ctx = trace.ContextWithSpanContext(ctx, sc)
	return ctx, trace.SpanFromContext(ctx), FormatTraceparent(sc)
}

// CapsuleTraceparent is the traceparent [Tracer.StartCapsule] returns,
// without the context: what RECEPTION keeps when nothing records, where
// no span reads the context.
func CapsuleTraceparent(incoming, traceID string) string {
	return FormatTraceparent(capsuleSpanContext(incoming, traceID))
}

// capsuleSpanContext chooses a capsule's root span context (see
// [Tracer.StartCapsule]).
func capsuleSpanContext(incoming, traceID string) trace.SpanContext {
	cfg := trace.SpanContextConfig{SpanID: randomSpanID(), TraceFlags: trace.FlagsSampled}
	if parent, err := ParseTraceparent(incoming); err == nil {
		cfg.TraceID, cfg.TraceFlags = parent.TraceID(), parent.TraceFlags()
	} else if tid, ok := TraceIDOf(traceID); ok {
		cfg.TraceID = tid
	} else {
		cfg.TraceID = randomTraceID()
	}
	return trace.NewSpanContext(cfg)
}

// ProducerSpan is the span id of a valid traceparent header (the
// producer's span), "" otherwise: what the checkpoint keeps so the
// capsule's span, recorded at its end, is the producer span's child.
func ProducerSpan(incoming string) string {
	if sc, err := ParseTraceparent(incoming); err == nil {
		return sc.SpanID().String()
	}
	return ""
}

// EndCapsule records the capsule's root span once it has ended: the span
// named by traceparent (the checkpoint's trace_parent), from start (its
// arrival) to end, a child of the producer's span producerSpan when there
// was one, with the capsule's outcome and halt reason.
func (t *Tracer) EndCapsule(ctx context.Context, traceparent, producerSpan string, c Capsule, start, end time.Time, outcome, haltReason string) {
	tr := t.tracer()
	root, err := ParseTraceparent(traceparent)
	if isNoop(tr) || err != nil || !root.IsSampled() {
		return
	}
	ctx = trace.ContextWithSpanContext(ctx, trace.SpanContext{}) // no parent but the producer's
	if sid, err := trace.SpanIDFromHex(producerSpan); err == nil {
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: root.TraceID(), SpanID: sid, TraceFlags: root.TraceFlags(), Remote: true}))
	} else {
		ctx = WithTraceID(ctx, root.TraceID())
	}
	ctx = withSpanID(ctx, root.SpanID())
	_, span := tr.Start(ctx, SpanCapsule, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(start),
		trace.WithAttributes(c.attrs(AttrOutcome.String(outcome))...))
	if haltReason != "" {
		span.SetAttributes(AttrHaltReason.String(haltReason))
		span.SetStatus(codes.Error, haltReason)
	}
	span.End(trace.WithTimestamp(end))
}

// StartPhase starts the span of one phase run. Its parent is the capsule's
// root span named by traceparent (the checkpoint's trace_parent), else the
// span in ctx, else — a checkpoint written before sagad traced — a root in
// the trace TraceIDOf(traceID).
func (t *Tracer) StartPhase(ctx context.Context, traceparent, traceID string, c Capsule, phase string, cycle int, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	// The traceparent first: finding no span in a phase's deep context
	// would walk all of it.
	if sc, err := ParseTraceparent(traceparent); err == nil {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	} else if !trace.SpanContextFromContext(ctx).IsValid() {
		if tid, ok := TraceIDOf(traceID); ok {
			ctx = WithTraceID(ctx, tid)
		}
	}
	tr := t.tracer()
	if isNoop(tr) {
		// Nothing records: the context's span is the phase's.
		return ctx, trace.SpanFromContext(ctx)
	}
	opts = append(opts, trace.WithAttributes(c.attrs(AttrPhase.String(phase), AttrCycle.Int(cycle))...))
	return tr.Start(ctx, SpanPhase+phase, opts...)
}

// EndPhase ends a phase span with its outcome (capsule.Outcome* or parked,
// retry), the halt reason and pause trigger if any, and the error that made
// the phase retry.
func EndPhase(span trace.Span, outcome, haltReason, trigger string, err error) {
	if span.IsRecording() {
		span.SetAttributes(AttrOutcome.String(outcome))
		if haltReason != "" {
			span.SetAttributes(AttrHaltReason.String(haltReason))
		}
		if trigger != "" {
			span.SetAttributes(AttrTrigger.String(trigger))
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else if haltReason != "" {
			span.SetStatus(codes.Error, haltReason)
		}
	}
	span.End()
}

// StartCall starts the span of one agent call (call is execute or review,
// agent the task kind or reviewer id), a child of the phase span in ctx.
func (t *Tracer) StartCall(ctx context.Context, call, agent, capsuleID string, cycle int) (context.Context, trace.Span) {
	tr := t.tracer()
	if isNoop(tr) {
		return ctx, trace.SpanFromContext(ctx)
	}
	return tr.Start(ctx, SpanCallPrefix+call+" "+agent, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(AttrCall.String(call), AttrAgent.String(agent), AttrCapsuleID.String(capsuleID), AttrCycle.Int(cycle),
			AttrGenAIOperationName.String(GenAIOperationInvokeAgent), AttrGenAIAgentName.String(agent)))
}

// EndCall ends an agent call's span with its outcome; err, if any, is
// recorded when the outcome is a failure.
func EndCall(span trace.Span, outcome string, err error) {
	if span.IsRecording() {
		span.SetAttributes(AttrOutcome.String(outcome))
		if err != nil && outcome != "accepted" {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// Traceparent is the traceparent of the span in ctx, "" when there is none:
// what a worker gets in the traceparent header or TRACEPARENT.
func Traceparent(ctx context.Context) string {
	return FormatTraceparent(trace.SpanContextFromContext(ctx))
}
