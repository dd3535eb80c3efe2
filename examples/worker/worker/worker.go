// Package worker is the demo worker of examples/worker: one executor and one
// independent reviewer served as a nats.go/micro service that speaks sagad's
// wire contract (see package executors). It is deliberately small: a worker
// in any language does the same with its NATS client.
//
// The executor writes a small JSON artifact ([Artifact]) restating the task
// and its acceptance criteria; the reviewer approves an artifact that covers
// every acceptance criterion, asks for changes otherwise, and refuses to
// review its own producer's work (Rule 15). Both answer a repeated
// idempotency key with their first answer. In async mode the executor's
// completion carries the completion_token of the call it answers: the
// latest call of the idempotency key, as sagad takes no other.
package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/sagad/sagad/artifactsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
)

// Names and subjects of the demo worker; examples/sagad.json points sagad at
// these subjects.
const (
	ServiceName           = "sagad-demo-worker"
	ServiceVersion        = "1.0.0"
	DefaultExecuteSubject = "agents.demo.execute"
	DefaultReviewSubject  = "agents.demo.review"
	DefaultAgentID        = "demo-worker"
	DefaultReviewerID     = "demo-reviewer"
)

// maxRemembered bounds the de-duplication memory; past it the worker forgets
// everything and starts over (a demo's compromise: a real worker keeps its
// answers in a store that survives restarts).
const maxRemembered = 10000

// Config configures [Serve].
type Config struct {
	// AgentID is the name the worker signs its artifacts with. Defaults to
	// [DefaultAgentID].
	AgentID string
	// ReviewerID is the reviewer identity this worker serves; it refuses to
	// review a capsule whose producer_agent_id is the same. Defaults to
	// [DefaultReviewerID].
	ReviewerID string
	// ExecuteSubject serves executor calls. Defaults to [DefaultExecuteSubject].
	ExecuteSubject string
	// ReviewSubject serves reviewer calls. Defaults to [DefaultReviewSubject].
	ReviewSubject string
	// Async makes the executor answer "accepted" at once and publish its
	// result on the completion subject right after. Defaults to false.
	Async bool
	// Logger gets a line per call. Defaults to discarding.
	Logger *slog.Logger
	// Only serves one endpoint, "execute" or "review"; empty serves both.
	// On sagad's embedded server each endpoint has credentials of its own
	// (an executor's cannot serve a reviewer's subject), so the demo serves
	// each on its own connection.
	Only string
}

func (c Config) withDefaults() Config {
	if c.AgentID == "" {
		c.AgentID = DefaultAgentID
	}
	if c.ReviewerID == "" {
		c.ReviewerID = DefaultReviewerID
	}
	if c.ExecuteSubject == "" {
		c.ExecuteSubject = DefaultExecuteSubject
	}
	if c.ReviewSubject == "" {
		c.ReviewSubject = DefaultReviewSubject
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// Artifact is what the demo executor produces.
type Artifact struct {
	Summary            string   `json:"summary"`
	Title              string   `json:"title"`
	Target             string   `json:"target"`
	AcceptanceCriteria []string `json:"acceptance_criteria"`
	// AddressedFindings are the previous review's findings this cycle answers.
	AddressedFindings []string `json:"addressed_findings,omitempty"`
	Cycle             int      `json:"cycle"`
	ProducedBy        string   `json:"produced_by"`
	// HealedFrom is the previous attempt's error, on a retry of sagad's
	// failure policy (the request's previous_failure).
	HealedFrom string `json:"healed_from,omitempty"`
	// OperatorAnswer is what a person answered (the request's
	// operator_answer): a resume's --answer, a revise's rationale.
	OperatorAnswer string `json:"operator_answer,omitempty"`
	// Revised is the prior artifact this revision read, and how.
	Revised *Revised `json:"revised,omitempty"`
	// Padding makes the artifact metadata.worker.pad_bytes long, to show a
	// prior artifact too large to travel inline.
	Padding string `json:"padding,omitempty"`
}

// Revised says which prior artifact a revision read: inline in the request,
// or by reference through saga.artifacts.get.
type Revised struct {
	Ref    string `json:"ref"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Via is "inline" or "reference".
	Via string `json:"via"`
}

// padBytes is metadata {"worker": {"pad_bytes": N}}: how long the demo makes
// its artifact.
func padBytes(c capsule.Capsule) int {
	var m struct {
		Worker struct {
			PadBytes int `json:"pad_bytes"`
		} `json:"worker"`
	}
	if len(c.Metadata) == 0 || json.Unmarshal(c.Metadata, &m) != nil {
		return 0
	}
	return min(max(m.Worker.PadBytes, 0), 8<<20)
}

// changesFirst is metadata {"worker": {"changes_first": true}}: the demo
// reviewer asks for changes on a capsule's first cycle, to show a revision.
func changesFirst(c capsule.Capsule) bool {
	var m struct {
		Worker struct {
			ChangesFirst bool `json:"changes_first"`
		} `json:"worker"`
	}
	return len(c.Metadata) > 0 && json.Unmarshal(c.Metadata, &m) == nil && m.Worker.ChangesFirst
}

// failFirst reports whether the capsule asks the demo to fail its first
// attempt retryably (metadata {"worker": {"fail_first": true}}), to show
// sagad's failure policy: the retry carries previous_failure.
func failFirst(c capsule.Capsule) bool {
	var m struct {
		Worker struct {
			FailFirst bool `json:"fail_first"`
		} `json:"worker"`
	}
	return len(c.Metadata) > 0 && json.Unmarshal(c.Metadata, &m) == nil && m.Worker.FailFirst
}

// Serve registers the demo worker's micro service on nc: endpoint "execute"
// on cfg.ExecuteSubject and "review" on cfg.ReviewSubject. Stop the returned
// service to stop serving.
func Serve(nc *nats.Conn, cfg Config) (micro.Service, error) {
	cfg = cfg.withDefaults()
	if cfg.Only != "" && cfg.Only != "execute" && cfg.Only != "review" {
		return nil, fmt.Errorf("worker: only %q: want execute or review", cfg.Only)
	}
	w := &worker{cfg: cfg, nc: nc, seen: map[string]answer{}}
	svc, err := micro.AddService(nc, micro.Config{
		Name:        ServiceName,
		Version:     ServiceVersion,
		Description: "sagad demo executor and reviewer",
		Metadata:    map[string]string{"agent_id": cfg.AgentID, "reviewer_id": cfg.ReviewerID},
	})
	if err != nil {
		return nil, fmt.Errorf("worker: add service: %w", err)
	}
	for _, ep := range []struct {
		name, subject string
		h             micro.HandlerFunc
	}{
		{"execute", cfg.ExecuteSubject, w.handle(executors.KindExecute, w.execute)},
		{"review", cfg.ReviewSubject, w.handle(executors.KindReview, w.review)},
	} {
		if cfg.Only != "" && cfg.Only != ep.name {
			continue
		}
		if err := svc.AddEndpoint(ep.name, ep.h, micro.WithEndpointSubject(ep.subject)); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("worker: add endpoint %s: %w", ep.name, err)
		}
	}
	return svc, nil
}

type worker struct {
	cfg Config
	nc  *nats.Conn

	mu   sync.Mutex
	seen map[string]answer // by kind + idempotency key
}

// answer is what a call was answered: the reply and, for accepted work, the
// completion (without its token: each call brings its own) and where it goes.
type answer struct {
	reply      []byte
	completion *executors.Completion
	subject    string
}

// handle de-duplicates by idempotency key around do, which computes the
// answer of a first call.
func (w *worker) handle(kind executors.CallKind, do func(data []byte) any) micro.HandlerFunc {
	return func(req micro.Request) {
		key := req.Headers().Get(executors.HeaderIdempotencyKey)
		h := req.Headers()
		// traceparent is the W3C context of sagad's span for this call: a
		// worker with an OpenTelemetry SDK would start its spans as its
		// children; this one logs it and forwards it with its completion.
		traceparent := h.Get(executors.HeaderTraceparent)
		log := w.cfg.Logger.With("call", kind, "capsule_id", h.Get(executors.HeaderCapsuleID),
			"cycle", h.Get(executors.HeaderCycle), "trace_id", h.Get(executors.HeaderTraceID), "traceparent", traceparent)
		w.mu.Lock()
		a, repeat := w.seen[string(kind)+" "+key]
		w.mu.Unlock()
		if !repeat {
			var err error
			if a, err = w.answer(kind, do(req.Data()), h); err != nil {
				log.Error("encode answer", "error", err)
				_ = req.Error("500", err.Error(), nil)
				return
			}
			if key != "" {
				w.remember(string(kind)+" "+key, a)
			}
		}
		if err := req.Respond(a.reply); err != nil {
			log.Error("respond", "error", err)
		}
		if a.completion != nil {
			// A repeated call carries a new token, and sagad now awaits
			// that one: the same result goes out again, with it.
			c := *a.completion
			c.CompletionToken = completionToken(req.Data())
			body, err := json.Marshal(c)
			if err != nil {
				log.Error("encode completion", "error", err)
				return
			}
			// After the reply, so sagad knows to wait before the result lands.
			go w.deliver(log, a.subject, body, traceparent)
		}
		log.Info("answered", "repeat", repeat, "async", a.completion != nil)
		log.Debug("reply", "body", string(a.reply))
	}
}

// completionDeadline bounds how long a completion is retried.
const completionDeadline = 10 * time.Minute

// deliver publishes a completion to JetStream and retries until the server
// acknowledges it: a result published with plain NATS while sagad's server
// restarts would be lost, and the capsule would wait for it in vain. The
// call's traceparent goes along, so the completion stays in the capsule's
// trace for whatever traces NATS messages.
func (w *worker) deliver(log *slog.Logger, subject string, completion []byte, traceparent string) {
	js, err := jetstream.New(w.nc)
	if err != nil {
		log.Error("publish completion", "subject", subject, "error", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), completionDeadline)
	defer cancel()
	backoff := 250 * time.Millisecond
	for {
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		msg := &nats.Msg{Subject: subject, Data: completion, Header: nats.Header{}}
		if traceparent != "" {
			msg.Header[executors.HeaderTraceparent] = []string{traceparent}
		}
		_, err := js.PublishMsg(pctx, msg)
		pcancel()
		if err == nil {
			return
		}
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
			// No stream stores completions (no sagad has set one up): a
			// plain publish reaches whoever listens.
			if err := w.nc.Publish(subject, completion); err != nil {
				log.Error("publish completion", "subject", subject, "error", err)
			}
			return
		}
		if w.nc.IsClosed() {
			return // the worker is shutting down
		}
		log.Warn("publish completion, will retry", "subject", subject, "error", err)
		select {
		case <-ctx.Done():
			log.Error("completion not delivered", "subject", subject, "error", err)
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// answer encodes reply, or in async mode an "accepted" reply and the
// completion carrying reply, addressed by the request's headers.
func (w *worker) answer(kind executors.CallKind, reply any, h micro.Headers) (answer, error) {
	b, err := json.Marshal(reply)
	if err != nil {
		return answer{}, err
	}
	r, ok := reply.(executors.ExecutorReply)
	capsuleID := h.Get(executors.HeaderCapsuleID)
	cycle, err := strconv.Atoi(h.Get(executors.HeaderCycle))
	if !w.cfg.Async || kind != executors.KindExecute || !ok || r.Status != executors.StatusOK || capsuleID == "" || err != nil {
		return answer{reply: b}, nil
	}
	c := &executors.Completion{
		Kind: kind, Status: r.Status, Content: r.Content, MediaType: r.MediaType, Usage: r.Usage,
	}
	accepted, _ := json.Marshal(executors.ExecutorReply{Status: executors.StatusAccepted})
	return answer{reply: accepted, completion: c, subject: executors.CompletionSubject(capsuleID, cycle)}, nil
}

// FetchArtifact reads an artifact's content by ref from sagad's
// saga.artifacts.get, page by page, with the current call's token (an
// executor's completion_token, a reviewer's call_token): sagad hands a call's
// worker exactly the artifacts that call names.
func FetchArtifact(nc *nats.Conn, ref, token string) ([]byte, error) {
	var out []byte
	for {
		body, err := json.Marshal(artifactsvc.Request{Ref: ref, Token: token, Offset: int64(len(out))})
		if err != nil {
			return nil, err
		}
		msg, err := nc.Request(artifactsvc.Subject, body, 10*time.Second)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", artifactsvc.Subject, err)
		}
		if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
			return nil, fmt.Errorf("%s refused (%s): %s", artifactsvc.Subject, code, msg.Header.Get(micro.ErrorHeader))
		}
		var page artifactsvc.Reply
		if err := json.Unmarshal(msg.Data, &page); err != nil {
			return nil, fmt.Errorf("%s: %w", artifactsvc.Subject, err)
		}
		if page.Offset != int64(len(out)) || (len(page.Data) == 0 && !page.EOF) {
			return nil, fmt.Errorf("%s: page at %d, want %d", artifactsvc.Subject, page.Offset, len(out))
		}
		out = append(out, page.Data...)
		if page.EOF {
			return out, nil
		}
	}
}

// completionToken is the completion_token of an executor request: the
// secret its completion must carry back ("" when there is none).
func completionToken(data []byte) string {
	var call struct {
		CompletionToken string `json:"completion_token"`
	}
	_ = json.Unmarshal(data, &call)
	return call.CompletionToken
}

func (w *worker) remember(key string, a answer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.seen) >= maxRemembered {
		clear(w.seen)
	}
	w.seen[key] = a
}

// execute produces the artifact.
func (w *worker) execute(data []byte) any {
	var call executors.ExecuteCall
	var c capsule.Capsule
	if err := json.Unmarshal(data, &call); err != nil {
		return executors.ExecutorReply{Status: executors.StatusFailed, Error: "bad request: " + err.Error()}
	}
	if err := json.Unmarshal(call.Capsule, &c); err != nil {
		return executors.ExecutorReply{Status: executors.StatusFailed, Error: "bad capsule: " + err.Error()}
	}
	if call.PreviousFailure == nil && failFirst(c) {
		return executors.ExecutorReply{Status: executors.StatusFailed, Retryable: true, Error: "demo: a transient failure (metadata.worker.fail_first)"}
	}
	a := Artifact{
		Summary:            fmt.Sprintf("%s: %s", c.Task.Title, c.Task.Description),
		Title:              c.Task.Title,
		Target:             c.Target,
		AcceptanceCriteria: c.Spec.AcceptanceCriteria,
		Cycle:              call.Cycle,
		ProducedBy:         w.cfg.AgentID,
	}
	if pf := call.PreviousFailure; pf != nil {
		a.HealedFrom = pf.Error
	}
	for _, f := range call.Findings {
		// The reviewer's findings come first, then an operator's revise
		// (source "operator").
		msg := f.Message
		if f.Source != "" {
			msg = f.Source + ": " + msg
		}
		a.AddressedFindings = append(a.AddressedFindings, msg)
	}
	if ans := call.OperatorAnswer; ans != nil {
		a.OperatorAnswer = ans.Text
	}
	if p := call.PriorArtifact; p != nil {
		// A revision starts from what it revises: inline when small, else
		// fetched by ref with this call's completion_token.
		r := &Revised{Ref: p.Ref, Size: p.Size, SHA256: p.SHA256, Via: "inline"}
		prior := []byte(p.Content)
		if prior == nil {
			r.Via = "reference"
			var err error
			if prior, err = FetchArtifact(w.nc, p.Ref, call.CompletionToken); err != nil {
				return executors.ExecutorReply{Status: executors.StatusFailed, Retryable: true, Error: "fetch prior artifact: " + err.Error()}
			}
		}
		if sum := sha256.Sum256(prior); hex.EncodeToString(sum[:]) != p.SHA256 || int64(len(prior)) != p.Size {
			return executors.ExecutorReply{Status: executors.StatusFailed, Error: "prior artifact: size or sha256 does not match"}
		}
		a.Revised = r
	}
	if n := padBytes(c); n > 0 {
		a.Padding = strings.Repeat("p", n)
	}
	content, err := json.Marshal(a)
	if err != nil {
		return executors.ExecutorReply{Status: executors.StatusFailed, Error: err.Error()}
	}
	// A stand-in for a model's bill: a token per character of the task.
	tokens := int64(len(c.Task.Title) + len(c.Task.Description))
	return executors.ExecutorReply{
		Status: executors.StatusOK, Content: content, MediaType: "application/json",
		Usage: capsule.Usage{Tokens: tokens, Dollars: float64(tokens) * 0.000002},
	}
}

// review judges the artifact.
func (w *worker) review(data []byte) any {
	var call executors.ReviewCall
	var c capsule.Capsule
	if err := json.Unmarshal(data, &call); err != nil {
		return executors.ReviewerReply{Status: executors.StatusFailed, Error: "bad request: " + err.Error()}
	}
	if err := json.Unmarshal(call.Capsule, &c); err != nil {
		return executors.ReviewerReply{Status: executors.StatusFailed, Error: "bad capsule: " + err.Error()}
	}
	content := call.Artifact.Content
	if len(content) == 0 && call.Artifact.Size > 0 && call.CallToken != "" {
		// Too large for the request: fetched by ref with the call's token.
		b, err := FetchArtifact(w.nc, call.Artifact.Ref, call.CallToken)
		if err != nil {
			return executors.ReviewerReply{Status: executors.StatusFailed, Error: "fetch artifact: " + err.Error()}
		}
		content = b
	}
	usage := capsule.Usage{Tokens: int64(len(content)/4 + 1)}
	usage.Dollars = float64(usage.Tokens) * 0.000002
	reply := func(v capsule.Verdict, findings ...capsule.Finding) any {
		return executors.ReviewerReply{Status: executors.StatusOK, Verdict: v, Findings: findings, Usage: usage}
	}
	if c.ProducerAgentID == w.cfg.ReviewerID || call.Artifact.ProducerAgentID == w.cfg.ReviewerID {
		return reply(capsule.Rejected, capsule.Finding{Rule: 15, Field: "review.reviewer_agent_id",
			Message: fmt.Sprintf("%s produced this artifact and cannot review it", w.cfg.ReviewerID)})
	}
	if call.Cycle == 1 && changesFirst(c) {
		return reply(capsule.ChangesRequested, capsule.Finding{Field: "artifact.content",
			Message: "demo: name the licence (metadata.worker.changes_first)"})
	}
	switch strings.TrimSpace(string(content)) {
	case "", "null", "{}", "[]", `""`:
		return reply(capsule.ChangesRequested, capsule.Finding{Field: "artifact.content", Message: "the artifact is empty"})
	}
	var a Artifact
	if json.Unmarshal(content, &a) == nil {
		var findings []capsule.Finding
		for _, want := range c.Spec.AcceptanceCriteria {
			if !slices.Contains(a.AcceptanceCriteria, want) {
				findings = append(findings, capsule.Finding{Field: "artifact.content.acceptance_criteria",
					Message: fmt.Sprintf("acceptance criterion %q is not addressed", want)})
			}
		}
		if len(findings) > 0 {
			return reply(capsule.ChangesRequested, findings...)
		}
	}
	return reply(capsule.Approved)
}
