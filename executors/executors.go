package executors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/tracing"
)

// Request is one executor call: produce the artifact for cycle Cycle.
type Request struct {
	Capsule *capsule.Capsule
	Raw     []byte
	Cycle   int
	// IdempotencyKey is "<capsule_id>/<cycle>": a worker that sees it twice
	// should return its first answer.
	IdempotencyKey string
	TraceID        string
	// TraceParent is the W3C traceparent of the call's span (filled by the
	// registry's executors, see [Registry.SetTracer]): NATS executors send it
	// as the traceparent header, command executors as TRACEPARENT.
	TraceParent string
	// Findings of the previous review when this cycle is a revision.
	Findings []capsule.Finding
	// PriorArtifactRef is the artifact the revision revises (the previous
	// cycle's, "artifact:<capsule_id>/<cycle>"); empty on a first cycle.
	PriorArtifactRef string
	// CompletionToken is this call's secret (see [NewCompletionToken]): a
	// worker that answers "accepted" puts it in its [Completion], which is
	// dropped without it. Every call, a repeat of the same idempotency key
	// included, carries a new one.
	CompletionToken string
	// CallToken is the secret of the claim the call is made under: a
	// worker that publishes a child capsule (parent_capsule_id) while
	// serving the call sends it as the Saga-Parent-Token header. Unlike
	// CompletionToken it stays the same across the claim's attempts.
	CallToken string
	// ContextArtifacts are the artifacts the capsule's artifact: context
	// refs name, in their order; artifact:<capsule_id>/final (a chain
	// step's input) is resolved to that capsule's final artifact.
	ContextArtifacts []capsule.Artifact
	// PreviousFailure is set on a retry by the failure policy (the
	// self-heal): what the attempt before this one failed with.
	PreviousFailure *PreviousFailure
	// PriorArtifact is the artifact PriorArtifactRef names, content
	// included; nil on a first cycle or when it is no longer stored.
	PriorArtifact *capsule.Artifact
	// OperatorAnswer is the latest answer a person gave the capsule (a
	// resume's --answer, a revise's rationale); nil when none.
	OperatorAnswer *capsule.OperatorAnswer
	// InlineBytes is the largest artifact content sent inside the request
	// (prior and context artifacts); a larger one goes by reference, for
	// the worker to fetch on saga.artifacts.get. 0 means
	// [DefaultInlineArtifactBytes].
	InlineBytes int64
}

// DefaultInlineArtifactBytes is the default [Request.InlineBytes]: 256 KiB.
const DefaultInlineArtifactBytes = 256 << 10

// Result is an executor's answer.
type Result struct {
	Content   json.RawMessage
	MediaType string
	Usage     capsule.Usage
}

// Executor produces artifacts.
type Executor interface {
	Execute(ctx context.Context, req Request) (Result, error)
}

// ReviewRequest is one reviewer call about one artifact.
type ReviewRequest struct {
	Capsule        *capsule.Capsule
	Raw            []byte
	Cycle          int
	Artifact       capsule.Artifact
	IdempotencyKey string
	TraceID        string
	// TraceParent is the W3C traceparent of the call's span, as in Request.
	TraceParent string
	// PreviousFailure is set on a retry by the failure policy: what the
	// reviewer's attempt before this one failed with.
	PreviousFailure *PreviousFailure
	// CallToken is this call's secret: a reviewer presents it on
	// saga.artifacts.get to fetch the artifact under review by reference.
	CallToken string
}

// ReviewResult is a reviewer's answer.
type ReviewResult struct {
	Verdict  capsule.Verdict
	Findings []capsule.Finding
	Usage    capsule.Usage
}

// Reviewer judges artifacts.
type Reviewer interface {
	Review(ctx context.Context, req ReviewRequest) (ReviewResult, error)
}

// FailedError is an executor's own failure (as opposed to a transport
// problem): the pipeline halts with executor_failed:<Detail>. It carries the
// usage the failed call still consumed.
type FailedError struct {
	Detail string
	Usage  capsule.Usage
	// ExitCode is a command's non-zero exit status; 0 when the failure is
	// not an exit status (a NATS reply, a timeout, a start failure).
	ExitCode int
	// Timeout says a command ran out of its Timeout (killed by sagad).
	Timeout bool
	// Retryable is a NATS worker's "retryable": true on a failed reply.
	Retryable bool
	// Stderr is the bounded tail of a command's stderr, for the
	// previous_failure of a self-heal retry.
	Stderr string
	// Finding, when set, is what the halt's finding says of the failure
	// beyond its detail: an agent's error frame (code and description),
	// a reviewer agent's unusable verdict.
	Finding string
	// RetryAfter is how long a retry must wait (a model API's rate limit
	// or overload, its Retry-After, bounded by [MaxRetryAfter]); 0 retries
	// at once. The pipeline waits it out by handing the phase's message
	// back for that long, not by holding a worker.
	RetryAfter time.Duration
}

func (e *FailedError) Error() string { return "executor failed: " + e.Detail }

// ErrUnknownKind is returned for a task.kind or reviewer id nobody serves.
var ErrUnknownKind = errors.New("executors: no executor or reviewer configured")

// Registry maps task kinds to executors and reviewer ids to reviewers.
type Registry struct {
	mu        sync.RWMutex
	executors map[string]Executor
	reviewers map[string]Reviewer
	tracer    *tracing.Tracer
	// policies and reviewerPolicies are the executors' and reviewers'
	// failure policies (policy.go).
	policies         map[string]Policy
	reviewerPolicies map[string]Policy
	// agents is the directory of the agent endpoints; nil without any.
	agents *AgentDirectory
	// agentEndpoints are the configured agent endpoints, for CheckAgents.
	agentEndpoints []AgentEndpoint
	// models is the "models" config (models.go).
	models Models
}

// AgentDirectory is the directory of the registry's agent endpoints (for
// `sagactl agents`), nil when it has none.
func (r *Registry) AgentDirectory() *AgentDirectory {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.agents
}

// NewRegistry returns a registry with the built-in stubs registered: the
// "stub" task kind and the "stub-reviewer" reviewer.
func NewRegistry() *Registry {
	r := &Registry{executors: map[string]Executor{}, reviewers: map[string]Reviewer{}}
	r.RegisterExecutor(StubKind, Stub{})
	r.RegisterReviewer(StubReviewerID, StubReviewer{})
	return r
}

// RegisterExecutor serves task.kind kind with e, replacing any previous one.
func (r *Registry) RegisterExecutor(kind string, e Executor) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.executors[kind] = e
}

// RegisterReviewer serves reviewer id with rv, replacing any previous one.
func (r *Registry) RegisterReviewer(id string, rv Reviewer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reviewers[id] = rv
}

// Executor returns the executor for kind.
func (r *Registry) Executor(kind string) (Executor, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if e, ok := r.executors[kind]; ok {
		if r.tracer != nil {
			return tracedExecutor{e: e, kind: kind, t: r.tracer}, nil
		}
		return e, nil
	}
	return nil, fmt.Errorf("%w: task.kind %q", ErrUnknownKind, kind)
}

// Delegates reports whether kind's executor can publish child capsules
// (parent_capsule_id): every executor but the built-in [Stub], which runs
// in sagad and holds no connection. A capsule whose executor cannot
// delegate has no children, so its charges need no look at a family
// record.
func (r *Registry) Delegates(kind string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, stub := r.executors[kind].(Stub)
	return !stub
}

// Reviewer returns the reviewer for id.
func (r *Registry) Reviewer(id string) (Reviewer, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if rv, ok := r.reviewers[id]; ok {
		if r.tracer != nil {
			return tracedReviewer{rv: rv, id: id, t: r.tracer}, nil
		}
		return rv, nil
	}
	return nil, fmt.Errorf("%w: reviewer %q", ErrUnknownKind, id)
}

// Kinds lists the task kinds with an executor, sorted (Rule 22).
func (r *Registry) Kinds() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.executors))
	for k := range r.executors {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ReviewerIDs lists the reviewer ids with a reviewer, sorted (Rule 22).
func (r *Registry) ReviewerIDs() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.reviewers))
	for id := range r.reviewers {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}
