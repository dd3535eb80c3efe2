package executors

import (
	"context"
	"errors"

	"github.com/sagad/sagad/internal/tracing"
)

// SetTracer makes every executor and reviewer the registry hands out trace
// its calls: a span per call (a child of the phase's span in the call's
// context) with the call's outcome, and the W3C traceparent of that span in
// Request.TraceParent / ReviewRequest.TraceParent, which NATS executors send
// as the traceparent header and command executors as TRACEPARENT. A no-op
// tracer (tracing.New(nil)) still fills TraceParent from the context, so
// workers get the capsule's trace when sagad itself records no spans; the
// pipeline always sets one. Without SetTracer the registry hands out its
// executors as registered.
func (r *Registry) SetTracer(t *tracing.Tracer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tracer = t
}

type tracedExecutor struct {
	e    Executor
	kind string
	t    *tracing.Tracer
}

func (x tracedExecutor) Execute(ctx context.Context, req Request) (Result, error) {
	id := ""
	if req.Capsule != nil {
		id = req.Capsule.CapsuleID
	}
	ctx, span := x.t.StartCall(ctx, string(KindExecute), x.kind, id, req.Cycle)
	if req.TraceParent == "" {
		req.TraceParent = tracing.Traceparent(ctx)
	}
	res, err := x.e.Execute(ctx, req)
	tracing.EndCall(span, CallOutcome(ctx, err), err)
	return res, err
}

type tracedReviewer struct {
	rv Reviewer
	id string
	t  *tracing.Tracer
}

func (x tracedReviewer) Review(ctx context.Context, req ReviewRequest) (ReviewResult, error) {
	id := ""
	if req.Capsule != nil {
		id = req.Capsule.CapsuleID
	}
	ctx, span := x.t.StartCall(ctx, string(KindReview), x.id, id, req.Cycle)
	if req.TraceParent == "" {
		req.TraceParent = tracing.Traceparent(ctx)
	}
	res, err := x.rv.Review(ctx, req)
	tracing.EndCall(span, CallOutcome(ctx, err), err)
	return res, err
}

// CallOutcome names how an agent call ended, as its span says: ok,
// accepted (the result follows on the completion subject), human_input,
// failed (the agent's own failure) or error (transport, timeout, a
// malformed reply).
func CallOutcome(ctx context.Context, err error) string {
	var failed *FailedError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrAccepted):
		return "accepted"
	case errors.Is(err, ErrHumanInput):
		return "human_input"
	case errors.As(err, &failed) && ctx.Err() == nil:
		return "failed"
	}
	return "error"
}
