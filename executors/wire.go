package executors

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/tracing"
)

// NATS headers every executor and reviewer request carries.
const (
	HeaderCapsuleID      = "Saga-Capsule-Id"
	HeaderCycle          = "Saga-Cycle"
	HeaderIdempotencyKey = "Saga-Idempotency-Key"
	HeaderTraceID        = "Saga-Trace-Id"
	// HeaderTraceparent is the W3C traceparent of the call's span.
	HeaderTraceparent = tracing.HeaderTraceparent
)

// CompletionPrefix starts every completion subject; sagad subscribes to
// CompletionPrefix + ">".
const CompletionPrefix = "saga.complete."

// CompletionSubject is where a worker publishes the result of an accepted
// call for (capsuleID, cycle).
func CompletionSubject(capsuleID string, cycle int) string {
	return CompletionPrefix + capsuleID + "." + strconv.Itoa(cycle)
}

// ParseCompletionSubject is the inverse of [CompletionSubject]: it accepts
// exactly the subjects CompletionSubject writes, and a capsule id comes back
// in canonical form (capsule.CanonicalID).
func ParseCompletionSubject(subject string) (capsuleID string, cycle int, err error) {
	rest, ok := strings.CutPrefix(subject, CompletionPrefix)
	id, n, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || id == "" || strings.Contains(n, ".") {
		return "", 0, fmt.Errorf("completion subject %q: want %s<capsule_id>.<cycle>", subject, CompletionPrefix)
	}
	cycle, err = strconv.Atoi(n)
	// Only the spelling CompletionSubject writes: "01" or "+1" would be a
	// second subject for the same (capsule, cycle).
	if err != nil || cycle < 1 || strconv.Itoa(cycle) != n {
		return "", 0, fmt.Errorf("completion subject %q: cycle %q is not a positive integer", subject, n)
	}
	// A worker may write the id in either case; the checkpoint is keyed by
	// the canonical one.
	id, _ = capsule.CanonicalID(id)
	return id, cycle, nil
}

// CallKind says which role a request or completion is for.
type CallKind string

// Call kinds.
const (
	KindExecute CallKind = "execute"
	KindReview  CallKind = "review"
)

// Status is the status of a reply or completion.
type Status string

// Reply statuses.
const (
	StatusOK       Status = "ok"
	StatusAccepted Status = "accepted"
	StatusFailed   Status = "failed"
)

// ExecuteCall is the JSON body of an executor request.
type ExecuteCall struct {
	Kind           CallKind          `json:"kind"`
	Capsule        json.RawMessage   `json:"capsule"`
	Cycle          int               `json:"cycle"`
	IdempotencyKey string            `json:"idempotency_key"`
	TraceID        string            `json:"trace_id"`
	Findings       []capsule.Finding `json:"findings"`
	// PriorArtifactRef names the artifact a revision revises (its findings
	// are about it); omitted on a first cycle.
	PriorArtifactRef string `json:"prior_artifact_ref,omitempty"`
	// CompletionToken is the call's secret, which a [Completion] of
	// accepted work must carry back; omitted when the call has none.
	CompletionToken string `json:"completion_token,omitempty"`
	// CallToken is the secret a child capsule published while serving
	// this call presents in its Saga-Parent-Token header; omitted when the
	// call has none.
	CallToken string `json:"call_token,omitempty"`
	// ContextArtifacts are the artifacts the capsule's artifact: context
	// refs name (a chain step's: the previous step's final artifact);
	// omitted when there are none.
	ContextArtifacts []capsule.Artifact `json:"context_artifacts,omitempty"`
	// PreviousFailure is what the previous attempt of this cycle failed
	// with, on a retry of the failure policy; omitted on a first attempt.
	PreviousFailure *PreviousFailure `json:"previous_failure,omitempty"`
	// PriorArtifact is the artifact a revision revises: its ref, size and
	// sha256 always, its content when at most the inline limit; omitted
	// on a first cycle.
	PriorArtifact *ArtifactBody `json:"prior_artifact,omitempty"`
	// OperatorAnswer is what a person answered (a resume's --answer, a
	// revise's rationale); omitted when nobody did.
	OperatorAnswer *capsule.OperatorAnswer `json:"operator_answer,omitempty"`
}

// ArtifactBody is an artifact in a request: always its ref, media type,
// size and sha256; its content only when at most the inline limit. Without
// content a worker fetches it by ref on saga.artifacts.get with the call's
// completion_token.
type ArtifactBody struct {
	Ref       string          `json:"ref"`
	MediaType string          `json:"media_type,omitempty"`
	Size      int64           `json:"size"`
	SHA256    string          `json:"sha256"`
	Content   json.RawMessage `json:"content,omitempty"`
}

// inline returns a's content when it is at most limit bytes, else nil.
func inline(content json.RawMessage, limit int64) json.RawMessage {
	if int64(len(content)) > limit {
		return nil
	}
	return content
}

func inlineLimit(n int64) int64 {
	if n <= 0 {
		return DefaultInlineArtifactBytes
	}
	return n
}

// NewExecuteCall builds the wire request of req.
func NewExecuteCall(req Request) (ExecuteCall, error) {
	raw, err := capsuleJSON(req.Capsule, req.Raw)
	if err != nil {
		return ExecuteCall{}, err
	}
	findings := req.Findings
	if findings == nil {
		findings = []capsule.Finding{}
	}
	limit := inlineLimit(req.InlineBytes)
	var prior *ArtifactBody
	if a := req.PriorArtifact; a != nil {
		prior = &ArtifactBody{Ref: cmpOr(a.Ref, req.PriorArtifactRef), MediaType: a.MediaType, Size: int64(len(a.Content)), SHA256: a.SHA256, Content: inline(a.Content, limit)}
	}
	var ctxArts []capsule.Artifact
	for _, a := range req.ContextArtifacts {
		a.Content = inline(a.Content, limit)
		ctxArts = append(ctxArts, a)
	}
	return ExecuteCall{
		Kind: KindExecute, Capsule: raw, Cycle: req.Cycle,
		IdempotencyKey: req.IdempotencyKey, TraceID: req.TraceID, Findings: findings,
		PriorArtifactRef: req.PriorArtifactRef, CompletionToken: req.CompletionToken,
		ContextArtifacts: ctxArts,
		PreviousFailure:  req.PreviousFailure,
		PriorArtifact:    prior,
		OperatorAnswer:   req.OperatorAnswer,
		CallToken:        req.CallToken,
	}, nil
}

// Shrink drops the inline contents of the call's artifacts, largest
// first, until its encoding is at most max bytes (a NATS server's max
// payload): the worker fetches what was dropped by reference. It returns
// the encoding, or an error when even without contents it is too large.
func (c ExecuteCall) Shrink(max int) ([]byte, error) {
	for {
		b, err := json.Marshal(c)
		if err != nil || max <= 0 || len(b) <= max {
			return b, err
		}
		// The largest inline content goes first.
		big, at := 0, -2
		if c.PriorArtifact != nil && len(c.PriorArtifact.Content) > big {
			big, at = len(c.PriorArtifact.Content), -1
		}
		for i, a := range c.ContextArtifacts {
			if len(a.Content) > big {
				big, at = len(a.Content), i
			}
		}
		switch at {
		case -2:
			return nil, fmt.Errorf("executors: request of %d bytes exceeds the max payload of %d even without artifact contents", len(b), max)
		case -1:
			p := *c.PriorArtifact
			p.Content = nil
			c.PriorArtifact = &p
		default:
			arts := append([]capsule.Artifact(nil), c.ContextArtifacts...)
			arts[at].Content = nil
			c.ContextArtifacts = arts
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ReviewCall is the JSON body of a reviewer request.
type ReviewCall struct {
	Kind           CallKind         `json:"kind"`
	Capsule        json.RawMessage  `json:"capsule"`
	Cycle          int              `json:"cycle"`
	IdempotencyKey string           `json:"idempotency_key"`
	TraceID        string           `json:"trace_id"`
	Artifact       capsule.Artifact `json:"artifact"`
	// PreviousFailure is what the reviewer's previous attempt of this cycle
	// failed with, on a retry of the failure policy; omitted on a first
	// attempt.
	PreviousFailure *PreviousFailure `json:"previous_failure,omitempty"`
	// CallToken is the call's secret for saga.artifacts.get: the artifact
	// under review can be fetched by ref with it when its content was
	// dropped to fit the max payload. Omitted when the call has none.
	CallToken string `json:"call_token,omitempty"`
}

// NewReviewCall builds the wire request of req.
func NewReviewCall(req ReviewRequest) (ReviewCall, error) {
	raw, err := capsuleJSON(req.Capsule, req.Raw)
	if err != nil {
		return ReviewCall{}, err
	}
	return ReviewCall{
		Kind: KindReview, Capsule: raw, Cycle: req.Cycle,
		IdempotencyKey: req.IdempotencyKey, TraceID: req.TraceID, Artifact: req.Artifact,
		PreviousFailure: req.PreviousFailure, CallToken: req.CallToken,
	}, nil
}

// capsuleJSON prefers the capsule's bytes as published, so a worker sees
// every member, including ones this version of sagad does not model.
func capsuleJSON(c *capsule.Capsule, raw []byte) (json.RawMessage, error) {
	if len(raw) > 0 && json.Valid(raw) {
		return raw, nil
	}
	if c == nil {
		return nil, fmt.Errorf("executors: request without a capsule")
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("executors: encode capsule: %w", err)
	}
	return b, nil
}

// callMeta is what travels beside the body: headers over NATS, environment
// variables for a command.
type callMeta struct {
	kind           CallKind
	capsuleID      string
	cycle          int
	idempotencyKey string
	traceID        string
	// traceparent is the call span's W3C traceparent.
	traceparent string
	// completionToken goes to a command's environment, never into NATS
	// headers: headers are what tracing and monitoring tools show.
	completionToken string
	// priorArtifactRef is the artifact a revision revises.
	priorArtifactRef string
	// operatorAnswer is the text of the operator's answer, for a command's
	// SAGA_OPERATOR_ANSWER.
	operatorAnswer string
	// callToken, like completionToken, goes to a command's environment
	// only.
	callToken string
}

func executeMeta(req Request) callMeta {
	m := callMeta{kind: KindExecute, cycle: req.Cycle, idempotencyKey: req.IdempotencyKey, traceID: req.TraceID, traceparent: req.TraceParent, completionToken: req.CompletionToken, priorArtifactRef: req.PriorArtifactRef, callToken: req.CallToken}
	if req.OperatorAnswer != nil {
		m.operatorAnswer = req.OperatorAnswer.Text
	}
	if req.Capsule != nil {
		m.capsuleID = req.Capsule.CapsuleID
	}
	return m
}

func reviewMeta(req ReviewRequest) callMeta {
	m := callMeta{kind: KindReview, cycle: req.Cycle, idempotencyKey: req.IdempotencyKey, traceID: req.TraceID, traceparent: req.TraceParent}
	if req.Capsule != nil {
		m.capsuleID = req.Capsule.CapsuleID
	}
	return m
}

func (m callMeta) header() nats.Header {
	h := nats.Header{}
	h.Set(HeaderCapsuleID, m.capsuleID)
	h.Set(HeaderCycle, strconv.Itoa(m.cycle))
	h.Set(HeaderIdempotencyKey, m.idempotencyKey)
	if m.traceID != "" {
		h.Set(HeaderTraceID, m.traceID)
	}
	if m.traceparent != "" {
		// Lower case, as W3C Trace Context spells it: NATS headers are
		// case-sensitive, and OpenTelemetry's propagators look for this.
		h[HeaderTraceparent] = []string{m.traceparent}
	}
	return h
}

// ExecutorReply is an executor's answer, and the body of an execute
// [Completion].
type ExecutorReply struct {
	// Status defaults to ok when omitted.
	Status Status `json:"status"`
	// Content is the artifact; required when Status is ok.
	Content json.RawMessage `json:"content,omitempty"`
	// MediaType of Content. Defaults to application/json.
	MediaType string        `json:"media_type,omitempty"`
	Usage     capsule.Usage `json:"usage"`
	// Error says why, when Status is failed.
	Error string `json:"error,omitempty"`
	// Retryable, on a failed reply, asks sagad to call again (the failure
	// policy's retry); false or omitted halts the capsule.
	Retryable bool `json:"retryable,omitempty"`
}

// DecodeExecutorReply parses and checks an executor's reply. Errors wrap
// [ErrMalformedReply] and say what is wrong.
func DecodeExecutorReply(data []byte) (ExecutorReply, error) {
	var r ExecutorReply
	if err := decodeObject(data, &r); err != nil {
		return r, err
	}
	if err := checkStatus(&r.Status, true); err != nil {
		return r, err
	}
	if err := checkUsage(r.Usage); err != nil {
		return r, err
	}
	if r.Status == StatusOK {
		if c := strings.TrimSpace(string(r.Content)); c == "" || c == "null" {
			return r, malformed(`status "ok" without content`)
		}
		if r.MediaType == "" {
			r.MediaType = "application/json"
		}
	}
	return r, nil
}

// Result maps a decoded reply to what an [Executor] returns: the result when
// ok, a [*FailedError] when failed, an [*AcceptedError] (Subject unset) when
// accepted.
func (r ExecutorReply) Result() (Result, error) {
	switch r.Status {
	case StatusFailed:
		return Result{Usage: r.Usage}, &FailedError{Detail: failureText(r.Error), Usage: r.Usage, Retryable: r.Retryable}
	case StatusAccepted:
		return Result{Usage: r.Usage}, &AcceptedError{Usage: r.Usage}
	}
	return Result{Content: r.Content, MediaType: r.MediaType, Usage: r.Usage}, nil
}

// ReviewerReply is a reviewer's answer, and the body of a review
// [Completion].
type ReviewerReply struct {
	// Status defaults to ok when omitted.
	Status Status `json:"status"`
	// Verdict is required when Status is ok.
	Verdict  capsule.Verdict   `json:"verdict,omitempty"`
	Findings []capsule.Finding `json:"findings,omitempty"`
	Usage    capsule.Usage     `json:"usage"`
	// Error says why, when Status is failed.
	Error string `json:"error,omitempty"`
}

// DecodeReviewerReply parses and checks a reviewer's reply. Errors wrap
// [ErrMalformedReply] and say what is wrong.
func DecodeReviewerReply(data []byte) (ReviewerReply, error) {
	var r ReviewerReply
	if err := decodeObject(data, &r); err != nil {
		return r, err
	}
	if err := checkStatus(&r.Status, true); err != nil {
		return r, err
	}
	if err := checkUsage(r.Usage); err != nil {
		return r, err
	}
	if r.Status == StatusOK && !r.Verdict.Valid() {
		return r, malformed("verdict %q: want APPROVED, CHANGES_REQUESTED or REJECTED", r.Verdict)
	}
	for i, f := range r.Findings {
		if strings.TrimSpace(f.Message) == "" {
			return r, malformed("findings[%d]: message is required", i)
		}
	}
	return r, nil
}

// Result maps a decoded reply to what a [Reviewer] returns, like
// [ExecutorReply.Result]; its findings are capped (capsule.CapFindings).
func (r ReviewerReply) Result() (ReviewResult, error) {
	switch r.Status {
	case StatusFailed:
		return ReviewResult{Usage: r.Usage}, &FailedError{Detail: failureText(r.Error), Usage: r.Usage}
	case StatusAccepted:
		return ReviewResult{Usage: r.Usage}, &AcceptedError{Usage: r.Usage}
	}
	// A worker's findings go into the checkpoint: capped, so it stays one
	// NATS message.
	return ReviewResult{Verdict: r.Verdict, Findings: capsule.CapFindings(r.Findings, capsule.MaxFindings), Usage: r.Usage}, nil
}

// Completion is the message a worker publishes on
// CompletionSubject(capsule_id, cycle) when accepted work is done: an
// [ExecutorReply] or a [ReviewerReply] with Kind saying which.
type Completion struct {
	Kind CallKind `json:"kind"`
	// IdempotencyKey optionally echoes the request's.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// CompletionToken is the completion_token of the call that was
	// accepted (the latest call of the idempotency key, when it came more
	// than once). sagad drops a completion without the right one.
	CompletionToken string `json:"completion_token,omitempty"`
	// Status is ok or failed; "accepted" is not a completion.
	Status    Status            `json:"status"`
	Content   json.RawMessage   `json:"content,omitempty"`
	MediaType string            `json:"media_type,omitempty"`
	Verdict   capsule.Verdict   `json:"verdict,omitempty"`
	Findings  []capsule.Finding `json:"findings,omitempty"`
	Usage     capsule.Usage     `json:"usage"`
	Error     string            `json:"error,omitempty"`
	// Retryable, on a failed execute completion, is [ExecutorReply.Retryable].
	Retryable bool `json:"retryable,omitempty"`
}

// DecodeCompletion parses and checks a completion message by the rules of
// the reply of its kind. Errors wrap [ErrMalformedReply].
func DecodeCompletion(data []byte) (Completion, error) {
	var c Completion
	if err := decodeObject(data, &c); err != nil {
		return c, err
	}
	if err := checkStatus(&c.Status, false); err != nil {
		return c, err
	}
	var err error
	switch c.Kind {
	case KindExecute:
		var r ExecutorReply
		r, err = DecodeExecutorReply(data)
		c.MediaType = r.MediaType
	case KindReview:
		_, err = DecodeReviewerReply(data)
	default:
		err = malformed("kind %q: want execute or review", c.Kind)
	}
	return c, err
}

// ExecutorReply is the completion as an executor's reply.
func (c Completion) ExecutorReply() ExecutorReply {
	return ExecutorReply{Status: c.Status, Content: c.Content, MediaType: c.MediaType, Usage: c.Usage, Error: c.Error, Retryable: c.Retryable}
}

// ReviewerReply is the completion as a reviewer's reply.
func (c Completion) ReviewerReply() ReviewerReply {
	return ReviewerReply{Status: c.Status, Verdict: c.Verdict, Findings: c.Findings, Usage: c.Usage, Error: c.Error}
}

func decodeObject(data []byte, v any) error {
	if len(strings.TrimSpace(string(data))) == 0 {
		return malformed("empty reply")
	}
	if err := json.Unmarshal(data, v); err != nil {
		return malformed("%v", err)
	}
	return nil
}

func checkStatus(s *Status, acceptedOK bool) error {
	switch *s {
	case "":
		*s = StatusOK
	case StatusOK, StatusFailed:
	case StatusAccepted:
		if !acceptedOK {
			return malformed(`status "accepted" in a completion: want ok or failed`)
		}
	default:
		return malformed("status %q: want ok, accepted or failed", *s)
	}
	return nil
}

// checkUsage refuses usage that is negative or not finite: it would give
// budget back or slip past every cap, so the reply is malformed and the
// call fails ("… malformed reply: invalid usage: …") with nothing recorded.
func checkUsage(u capsule.Usage) error {
	if err := u.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformedReply, err)
	}
	return nil
}

func failureText(msg string) string {
	if msg = strings.TrimSpace(msg); msg != "" {
		return msg
	}
	return "worker reported failure without a message"
}
