package executors

import (
	"context"
	"time"
)

// A streamed call (an agent's, over the Agent Protocol for NATS, or a
// model's with "stream": true) is seen while it runs: the adapter reports
// its progress and an agent's questions to the [CallObserver] the caller
// put in the call's context. The pipeline's observer shows the progress on
// `sagactl status` and the console, and turns a question into a pause with
// trigger agent_query whose answer goes back to the agent.

// CallProgress is a running call as seen so far.
type CallProgress struct {
	// Agent names who answers: the agent's "<agent>.<owner>.<session>" or
	// a model's id.
	Agent string `json:"agent"`
	// Subject is the subject the call was sent to (agents), empty for a
	// model.
	Subject string `json:"subject,omitempty"`
	// Chunks and Bytes count the stream's chunks and response bytes so far.
	Chunks int   `json:"chunks"`
	Bytes  int64 `json:"bytes"`
	// Started is when the call was sent; LastChunk when the last chunk
	// arrived (zero before the first).
	Started   time.Time `json:"started"`
	LastChunk time.Time `json:"last_chunk,omitzero"`
	// Text is the streamed response text so far, cut to its last
	// [MaxProgressText] bytes.
	Text string `json:"text,omitempty"`
	// Done is set on the last report of a call, whatever its end.
	Done bool `json:"done,omitempty"`
}

// MaxProgressText bounds [CallProgress.Text].
const MaxProgressText = 16 << 10

// AgentQuery is an agent's question during a call (a query chunk, §7 of the
// Agent Protocol for NATS).
type AgentQuery struct {
	// ID is the query's id as the agent gave it.
	ID string `json:"id"`
	// ReplySubject is where the answer is published (fire and forget).
	ReplySubject string `json:"reply_subject"`
	// Prompt is the question.
	Prompt string `json:"prompt"`
	// Agent is who asks, as in [CallProgress.Agent].
	Agent string `json:"agent"`
	// At is when the question arrived.
	At time.Time `json:"at"`
}

// CallObserver is told what a streamed call does. Its methods must return
// quickly (they run on the call's reading goroutine) and must be safe for
// concurrent use.
type CallObserver interface {
	// Progress reports the call's stream so far, at most a few times a
	// second, and once more with Done set at its end.
	Progress(p CallProgress)
	// Query reports an agent's question; the call goes on reading the
	// stream while a person is asked. An answer is published to
	// q.ReplySubject by whoever answers.
	Query(q AgentQuery)
}

type observerKey struct{}

// WithObserver returns ctx carrying o for the calls made under it.
func WithObserver(ctx context.Context, o CallObserver) context.Context {
	return context.WithValue(ctx, observerKey{}, o)
}

// ObserverFrom returns the [CallObserver] in ctx, or one that ignores
// everything.
func ObserverFrom(ctx context.Context) CallObserver {
	if o, ok := ctx.Value(observerKey{}).(CallObserver); ok && o != nil {
		return o
	}
	return nopObserver{}
}

type nopObserver struct{}

func (nopObserver) Progress(CallProgress) {}
func (nopObserver) Query(AgentQuery)      {}
