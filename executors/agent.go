package executors

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"text/template"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors/agentproto"
)

// Defaults of the agent adapter (type "agent").
const (
	// DefaultAgentTimeout is the ceiling of one agent call, the SDKs'
	// default.
	DefaultAgentTimeout = 10 * time.Minute
	// DefaultAgentIdleTimeout is the longest gap between two chunks.
	DefaultAgentIdleTimeout = 60 * time.Second
	// MaxAgentText bounds an agent's streamed text: past it the call
	// fails instead of holding an unbounded artifact in memory.
	MaxAgentText = 16 << 20
	// heartbeatMisses is how many heartbeat intervals an agent may stay
	// silent during a call before it counts as gone.
	heartbeatMisses = 3
	// progressEvery spaces the progress reports of a call.
	progressEvery = 250 * time.Millisecond
)

// AgentEndpoint is an agent speaking the Agent Protocol for NATS (v0.3),
// called as an executor ([AgentExecutor]) or a reviewer ([AgentReviewer]).
// The prompt is rendered from the capsule (prompt.go), the streamed
// response text is the artifact or holds the verdict.
type AgentEndpoint struct {
	Conn *nats.Conn
	// Name identifies the endpoint in failure details: its config key.
	Name string
	// Subject is the agent's prompt subject; empty when the agent is found
	// by discovery (Select).
	Subject string
	// Select names the agent to discover when Subject is empty.
	Select AgentSelector
	// Directory knows the live agents (discovery, heartbeats); nil means
	// none: Subject must be set, liveness is not watched.
	Directory *AgentDirectory
	// Source is the directory's source the endpoint's agents are trusted
	// from (its account's imports); "" is the directory's default.
	Source string
	// Timeout is the ceiling of one call. Defaults to
	// [DefaultAgentTimeout].
	Timeout time.Duration
	// IdleTimeout is the longest gap between chunks. Defaults to
	// [DefaultAgentIdleTimeout].
	IdleTimeout time.Duration
	// Template renders the prompt; nil is the default template.
	Template *template.Template
	// AnswerSubject maps a query's reply_subject, a subject of the agent's
	// own account, to where sagad publishes the answer; ok false refuses
	// it (the question is dropped). Nil keeps an _INBOX subject as it is
	// (sagad and the agent share an account) and refuses any other.
	AnswerSubject func(reply string) (string, bool)
}

// AgentExecutor calls an agent as an executor: its streamed text is the
// artifact (text/markdown).
type AgentExecutor struct{ AgentEndpoint }

// AgentReviewer calls an agent as a reviewer: the last verdict object in
// its text is the verdict.
type AgentReviewer struct{ AgentEndpoint }

// Execute renders the prompt, streams the call and returns the text. The
// context artifacts go as attachments when the agent takes them and they
// fit, else inline in the prompt.
func (e AgentExecutor) Execute(ctx context.Context, req Request) (Result, error) {
	who := fmt.Sprintf("agent executor %q", e.who())
	out, err := e.call(ctx, executeMeta(req), who, func(attach bool) (agentproto.Envelope, error) {
		d := NewPromptData(req)
		var atts []agentproto.Attachment
		if attach {
			atts = attachContext(&d, req.ContextArtifacts)
		}
		prompt, err := render(cmpTemplate(e.Template, defaultExecute), d)
		return agentproto.Envelope{Prompt: prompt, Attachments: atts}, err
	})
	if err != nil {
		return Result{}, err
	}
	if out.text == "" {
		return Result{}, &FailedError{Detail: who + ": the agent's answer holds no text", Usage: out.usage, Retryable: true}
	}
	return Result{Content: TextContent(out.text), MediaType: TextMediaType, Usage: out.usage}, nil
}

// Review renders the review prompt, streams the call and reads the verdict.
func (r AgentReviewer) Review(ctx context.Context, req ReviewRequest) (ReviewResult, error) {
	who := fmt.Sprintf("agent reviewer %q", r.who())
	out, err := r.call(ctx, reviewMeta(req), who, func(bool) (agentproto.Envelope, error) {
		prompt, err := RenderReviewPrompt(r.Template, req)
		return agentproto.Envelope{Prompt: prompt}, err
	})
	if err != nil {
		return ReviewResult{}, err
	}
	verdict, findings, err := ParseVerdictText(out.text)
	if err != nil {
		// The self-heal retry tells the agent what was wrong.
		return ReviewResult{}, &FailedError{Detail: who + ": " + err.Error(), Usage: out.usage, Retryable: true, Finding: err.Error()}
	}
	return ReviewResult{Verdict: verdict, Findings: findings, Usage: out.usage}, nil
}

// attachContext moves the context artifacts of d into attachments (their
// whole text, under a basename of their ref) and leaves a line in the
// prompt saying which file holds each.
func attachContext(d *PromptData, arts []capsule.Artifact) []agentproto.Attachment {
	var atts []agentproto.Attachment
	for i, a := range arts {
		if i >= len(d.Context) {
			break
		}
		name := attachmentName(i, a.Ref)
		atts = append(atts, agentproto.NewAttachment(name, []byte(ArtifactText(a.Content))))
		d.Context[i].Text = fmt.Sprintf("[attached as %s, %d bytes]", name, d.Context[i].Size)
		d.Context[i].Truncated = false
	}
	return atts
}

// attachmentName is a basename for context artifact i: its ref's last
// path element, numbered so that two refs never share a name.
func attachmentName(i int, ref string) string {
	_, rest, _ := strings.Cut(ref, ":")
	base := path.Base(strings.ReplaceAll(cmp.Or(rest, ref), "\\", "/"))
	clean := []byte(base)
	for j, c := range clean {
		if c < 0x21 || c == 0x7f || c == '/' || c == '\\' {
			clean[j] = '_'
		}
	}
	if len(clean) == 0 || base == "." || base == "/" {
		clean = []byte("context")
	}
	return fmt.Sprintf("%d-%s", i+1, clean)
}

func (a AgentEndpoint) who() string {
	return cmp.Or(a.Name, a.Subject, a.Select.String())
}

// agentOutcome is what a finished stream gave.
type agentOutcome struct {
	text  string
	usage capsule.Usage
}

// call resolves the agent, builds the envelope (with attachments when the
// agent takes them and they fit, else without), sends it and reads the
// stream to its end. Every failure is a [*FailedError] carrying the usage
// reported or estimated so far, except ctx's end, returned wrapped as it
// is.
func (a AgentEndpoint) call(ctx context.Context, meta callMeta, who string, build func(attach bool) (agentproto.Envelope, error)) (agentOutcome, error) {
	if a.Conn == nil {
		return agentOutcome{}, fmt.Errorf("%s: no NATS connection", who)
	}
	target, err := a.resolve(ctx)
	if err != nil {
		return agentOutcome{}, &FailedError{Detail: who + ": " + err.Error(), Retryable: errors.Is(err, ErrAgentNotFound)}
	}
	limit := a.Conn.MaxPayload() - 4096
	if target.maxPayload > 0 {
		limit = min(limit, target.maxPayload)
	}
	body, err := envelope(build, target.attachmentsOK, limit)
	if err != nil {
		return agentOutcome{}, &FailedError{Detail: who + ": " + err.Error()}
	}
	if int64(len(body)) > limit {
		return agentOutcome{}, &FailedError{Detail: fmt.Sprintf("%s: the prompt is %d bytes, the agent takes at most %d", who, len(body), limit)}
	}
	s := &agentStream{
		ep: a, who: who, target: target, promptBytes: len(body), obs: ObserverFrom(ctx),
		progress: CallProgress{Agent: target.name, Subject: target.subject, Started: time.Now()},
	}
	return s.run(ctx, body, meta.header())
}

// envelope encodes the envelope build makes: with attachments when attach
// and they fit limit, else the text inline.
func envelope(build func(bool) (agentproto.Envelope, error), attach bool, limit int64) ([]byte, error) {
	if attach {
		env, err := build(true)
		if err != nil {
			return nil, err
		}
		if len(env.Attachments) > 0 {
			body, err := env.Encode()
			if err != nil || int64(len(body)) <= limit {
				return body, err
			}
		}
	}
	env, err := build(false)
	if err != nil {
		return nil, err
	}
	return env.Encode()
}

// agentTarget is the agent a call goes to.
type agentTarget struct {
	subject, name string
	// maxPayload is the endpoint's max_payload, 0 when unknown.
	maxPayload int64
	// attachmentsOK is the endpoint's attachments_ok (false when unknown).
	attachmentsOK bool
	// alive reports whether the agent still beats; nil when unknown.
	alive func() bool
}

func (a AgentEndpoint) resolve(ctx context.Context) (agentTarget, error) {
	if a.Subject != "" {
		// A named subject is called without asking discovery (no
		// responders says when nobody serves it); heartbeats heard on
		// its name still count.
		t := agentTarget{subject: a.Subject, name: subjectName(a.Subject)}
		if a.Directory != nil {
			t.alive = func() bool { return a.Directory.Alive(a.Source, a.Subject, heartbeatMisses) }
		}
		return t, nil
	}
	if a.Directory == nil {
		return agentTarget{}, fmt.Errorf("%w: no subject and no directory", ErrAgentNotFound)
	}
	inst, err := a.Directory.Pick(ctx, a.Source, a.Select)
	if err != nil {
		return agentTarget{}, err
	}
	return agentTarget{
		subject: inst.PromptSubject, name: inst.Name(), maxPayload: inst.MaxPayload, attachmentsOK: inst.AttachmentsOK,
		alive: func() bool { return a.Directory.Alive(a.Source, inst.PromptSubject, heartbeatMisses) },
	}, nil
}

func subjectName(subject string) string {
	if s, ok := agentproto.ParsePromptSubject(subject); ok {
		return s.Name()
	}
	return subject
}
