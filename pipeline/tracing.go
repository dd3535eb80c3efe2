package pipeline

import (
	"context"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/tracing"
	"github.com/sagad/sagad/phases"
	"github.com/sagad/sagad/store"
)

// runTraced runs phase ph inside its span: a child of the capsule's root
// span recorded in the checkpoint, so a capsule's phases form one trace
// whichever sagad runs them. The agent calls the phase makes are the span's
// children (executors.Registry.SetTracer).
func (p *Pipeline) runTraced(ctx context.Context, ph capsule.Phase, cycle int, cp *capsule.Checkpoint, in *phases.Input) phases.Decision {
	if !callsAgents(ph) && p.tracer.Off() {
		// Nothing records, and the capsule's trace context has one reader
		// only: an agent call (its traceparent, its exemplar's trace id).
		// Parsing the traceparent into a context was two allocations at
		// each of the other phases' runs.
		return p.phases[ph].Run(ctx, p.env, in)
	}
	ctx, span := p.tracer.StartPhase(ctx, cp.TraceParent, cp.TraceID, spanCapsule(cp), ph.String(), cycle, phaseSpanOptions(ph)...)
	d := p.phases[ph].Run(ctx, p.env, in)
	if span.IsRecording() {
		tracing.EndPhase(span, decisionOutcome(ph, d), d.Halt.String(), string(d.Trigger), d.Err)
	} else {
		span.End()
	}
	return d
}

// outcomeForwarded is the outcome of REALITY_ANCHOR's span when it sent
// its message undecided (forwardable): the phase that writes first
// decides it, and the checkpoint's history holds what it decided.
const outcomeForwarded = "forwarded"

// traceForward records the span of a phase that forwarded its message
// undecided.
func (p *Pipeline) traceForward(ctx context.Context, ph capsule.Phase, cycle int, cp *capsule.Checkpoint) {
	if p.tracer.Off() {
		// The span would be the context's own, not recording, and ending
		// it nothing: parsing the traceparent into a context was all it
		// cost (REALITY_ANCHOR's forward, once a capsule).
		return
	}
	_, span := p.tracer.StartPhase(ctx, cp.TraceParent, cp.TraceID, spanCapsule(cp), ph.String(), cycle, phaseSpanOptions(ph)...)
	if span.IsRecording() {
		tracing.EndPhase(span, outcomeForwarded, "", "", nil)
	} else {
		span.End()
	}
}

// traceReception starts the capsule's root span at RECEPTION and records its
// traceparent in the fresh checkpoint (the span is nil when tracing is off);
// see tracing.Tracer.StartCapsule for what an intake message's traceparent
// header may do (place the capsule in the producer's trace, nothing else).
func (p *Pipeline) traceReception(ctx context.Context, h nats.Header, fresh *capsule.Checkpoint, start time.Time) (context.Context, trace.Span) {
	in := incomingTraceparent(h)
	if p.tracer.Off() {
		// No span records (endReception, traceEnd): only the traceparent
		// the checkpoint keeps for the workers is made, not a context.
		fresh.TraceParent, fresh.TraceProducerSpan = tracing.CapsuleTraceparent(in, fresh.TraceID), tracing.ProducerSpan(in)
		return ctx, nil
	}
	ctx, root, tp := p.tracer.StartCapsule(ctx, in, fresh.TraceID, spanCapsule(fresh), start)
	fresh.TraceParent, fresh.TraceProducerSpan = tp, tracing.ProducerSpan(in)
	return ctx, root
}

// endReception records RECEPTION's span, from start to now, under the root
// span context in ctx (the root span itself is recorded when the capsule
// ends: traceEnd).
func (p *Pipeline) endReception(ctx context.Context, root trace.Span, cp *capsule.Checkpoint, d phases.Decision, start time.Time) {
	if p.tracer.Off() {
		return // root is nil: traceReception made no context
	}
	_, span := p.tracer.StartPhase(ctx, "", "", spanCapsule(cp), capsule.Reception.String(), 0, trace.WithTimestamp(start))
	if span.IsRecording() {
		tracing.EndPhase(span, decisionOutcome(capsule.Reception, d), d.Halt.String(), string(d.Trigger), d.Err)
	}
	_ = root
}

// traceEnd records the capsule's root span once its first run has ended:
// from its arrival to its end, so it covers every phase. A replay's runs
// are recorded under it as phases, not as a second root (one span id
// records once).
func (p *Pipeline) traceEnd(cp *capsule.Checkpoint) {
	if cp.Run > 0 || !cp.Terminal() {
		return
	}
	// Now, not the transition's time: the last phase's span has ended, and
	// the root must cover it.
	p.tracer.EndCapsule(context.Background(), cp.TraceParent, cp.TraceProducerSpan, spanCapsule(cp), cp.CreatedAt, time.Now(),
		string(cp.State.Status), cp.State.HaltReason)
}

// incomingTraceparent is the intake message's traceparent header, looked up
// as W3C spells it and as Go's canonical header form.
func incomingTraceparent(h nats.Header) string {
	if v := h.Get(tracing.HeaderTraceparent); v != "" {
		return v
	}
	return h.Get("Traceparent")
}

func spanCapsule(cp *capsule.Checkpoint) tracing.Capsule {
	return tracing.Capsule{ID: cp.CapsuleID, Key: cp.Key, WaveID: cp.WaveID}
}

// decisionOutcome names a phase's decision in the transitions' vocabulary
// (capsule.Outcome*), plus parked and retry, which record no transition.
func decisionOutcome(ph capsule.Phase, d phases.Decision) string {
	switch d.Action {
	case phases.Advance:
		if ph == capsule.Handoff {
			return capsule.OutcomeCompleted
		}
		return capsule.OutcomePassed
	case phases.LoopBack:
		return capsule.OutcomeLoopedBack
	case phases.Halt:
		return capsule.OutcomeHalted
	case phases.Park:
		return "parked"
	case phases.Retry:
		return "retry"
	}
	return d.Action.String()
}

// traceIDOf is the capsule's OpenTelemetry trace id (its root span's), the
// exemplar of its phases' durations; "" for a checkpoint written before
// sagad traced.
func traceIDOf(cp *capsule.Checkpoint) string {
	tp := cp.TraceParent
	if id, ok := capsule.TraceIDOf(tp); ok {
		// Version 00 in canonical form (every traceparent sagad makes),
		// tested eight digits at a time: valid unless an id is zeros.
		if tracing.ZeroID(id) || tracing.ZeroID(tp[36:52]) {
			return ""
		}
		return id
	}
	if tracing.ValidTraceparent(tp) {
		// A valid traceparent holds the id as its 32 lower-case hex digits,
		// what TraceID.String would make again at every transition; only
		// its validity is asked, not a span context built.
		return tp[3:35]
	}
	return ""
}

// phaseSpanOptions are the start options of phase ph's span: a consumer
// span with the messaging attributes of ph's subject and consumer. They are
// the same for every message of the phase, so they are made once rather
// than per message (two allocations a phase run, with tracing off too).
// The slices are clipped: StartPhase appends to them.
func phaseSpanOptions(ph capsule.Phase) []trace.SpanStartOption {
	if ph.Valid() {
		return spanOptions[ph]
	}
	return newPhaseSpanOptions(ph)
}

var spanOptions = func() (o [capsule.NumPhases][]trace.SpanStartOption) {
	for ph := range o {
		o[ph] = newPhaseSpanOptions(capsule.Phase(ph))
	}
	return o
}()

func newPhaseSpanOptions(ph capsule.Phase) []trace.SpanStartOption {
	return slices.Clip([]trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(tracing.MessagingProcess(store.PhaseSubject(ph), store.ConsumerName(ph))...),
	})
}
