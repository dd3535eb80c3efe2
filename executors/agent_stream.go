package executors

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors/agentproto"
)

// agentStream is one agent call's response stream being read.
type agentStream struct {
	ep          AgentEndpoint
	who         string
	target      agentTarget
	promptBytes int
	obs         CallObserver

	text     strings.Builder
	dollars  float64
	tokens   int64
	reported bool // a usage:{…} status gave tokens
	progress CallProgress
	lastSent time.Time
	// asking: the last chunk was a question handed to the observer; the
	// agent waits, silent, for a person's answer, so idle_timeout does not
	// run until its next chunk (timeout and heartbeats still do).
	asking bool
	// held: progress since the last report was held back; it is sent
	// when the stream goes quiet.
	held bool
}

// noRespondersStatus is the status header value nats-server puts on the
// reply when no one serves the subject.
const noRespondersStatus = "503"

// run publishes body and reads the stream until its terminator, an error
// frame, a timeout, the agent's heartbeats stopping or ctx's end.
func (s *agentStream) run(ctx context.Context, body []byte, h nats.Header) (agentOutcome, error) {
	nc := s.ep.Conn
	inbox := nc.NewRespInbox()
	// A synchronous subscription queues what arrives (up to the client's
	// pending limits) however fast an agent streams: no chunk is dropped
	// while one is handled.
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return agentOutcome{}, fmt.Errorf("%s: subscribe %s: %w", s.who, inbox, err)
	}
	// Unsubscribing is the only cancel the protocol has (§6.7).
	defer func() { _ = sub.Unsubscribe() }()
	defer s.report(true)

	ceiling := cmp.Or(s.ep.Timeout, DefaultAgentTimeout)
	idle := cmp.Or(s.ep.IdleTimeout, DefaultAgentIdleTimeout)
	cctx, cancel := context.WithTimeout(ctx, ceiling)
	defer cancel()
	if err := nc.PublishMsg(&nats.Msg{Subject: s.target.subject, Reply: inbox, Data: body, Header: h}); err != nil {
		return agentOutcome{}, s.fail(fmt.Sprintf("send to %s: %v", s.target.subject, err), true, false)
	}
	// Liveness is looked at between chunks at least this often.
	every := max(min(idle/4, 5*time.Second), 10*time.Millisecond)
	last, checked := time.Now(), time.Now()
	for {
		if time.Since(checked) >= every {
			// Keep-alives alone do not prove the agent lives: its host
			// may be gone with a proxy still acking.
			checked = time.Now()
			if s.target.alive != nil && !s.target.alive() {
				return agentOutcome{}, s.fail(fmt.Sprintf("the agent's heartbeats stopped for %d intervals", heartbeatMisses), true, false)
			}
		}
		wait := every
		if !s.asking {
			wait = min(every, max(idle-time.Since(last), time.Millisecond))
		}
		if s.held {
			wait = min(wait, max(progressEvery-time.Since(s.lastSent), time.Millisecond))
		}
		wctx, stop := context.WithTimeout(cctx, wait)
		m, err := sub.NextMsgWithContext(wctx)
		stop()
		if err != nil && s.held && time.Since(s.lastSent) >= progressEvery {
			s.report(false)
		}
		switch {
		case err == nil:
			done, err := s.frame(m)
			if err != nil || done {
				return s.outcome(), err
			}
			last = time.Now()
		case errors.Is(err, nats.ErrNoResponders):
			// The server's 503 status on the reply: nobody serves the
			// subject (a synchronous subscription reports it as an error).
			return agentOutcome{}, s.fail("no responders on "+s.target.subject, true, false)
		case ctx.Err() != nil:
			// Cancelled, or the claim was lost: stop listening (§6.7).
			return agentOutcome{}, fmt.Errorf("%s: stopped reading the stream: %w", s.who, ctx.Err())
		case cctx.Err() != nil:
			return agentOutcome{}, s.fail(fmt.Sprintf("no end of stream within %s (timeout)", ceiling), true, true)
		case !errors.Is(err, context.DeadlineExceeded):
			return agentOutcome{}, s.fail(fmt.Sprintf("read the stream: %v", err), true, false)
		case !s.asking && time.Since(last) >= idle:
			return agentOutcome{}, s.fail(fmt.Sprintf("no chunk for %s (idle_timeout)", idle), true, true)
		}
	}
}

// frame handles one message; done is true at the stream's end.
func (s *agentStream) frame(m *nats.Msg) (done bool, err error) {
	if len(m.Data) == 0 && m.Header.Get("Status") == noRespondersStatus {
		return true, s.fail("no responders on "+s.target.subject, true, false)
	}
	f, derr := agentproto.DecodeFrame(m.Data, len(m.Header) > 0, m.Header.Get(agentproto.ErrorCodeHeader), m.Header.Get(agentproto.ErrorHeader))
	if derr != nil {
		return true, s.fail(derr.Error(), false, false)
	}
	switch f.Kind {
	case agentproto.FrameEnd:
		return true, nil
	case agentproto.FrameError:
		return true, s.serviceError(f.Code, f.Description)
	}
	s.progress.Chunks++
	s.progress.LastChunk = time.Now()
	s.asking = false
	c := f.Chunk
	switch c.Type {
	case agentproto.TypeResponse:
		if s.text.Len()+len(c.Text) > MaxAgentText {
			return true, s.fail(fmt.Sprintf("the answer exceeds %d bytes", MaxAgentText), false, false)
		}
		s.text.WriteString(c.Text)
		s.progress.Bytes += int64(len(c.Text))
	case agentproto.TypeStatus:
		if u, ok := agentproto.ParseStatusUsage(c.Status); ok {
			s.dollars += u.Dollars
			if u.HasTokens {
				s.tokens += u.Tokens
				s.reported = true
			}
		}
	case agentproto.TypeQuery:
		s.query(*c.Query)
	}
	s.report(false)
	return false, nil
}

// query hands an agent's question to the observer; the stream goes on
// being read while a person answers. A reply subject the endpoint cannot
// reach from sagad's account is refused (the question is dropped): an
// answer published there could land anywhere.
func (s *agentStream) query(q agentproto.Query) {
	mapper := s.ep.AnswerSubject
	if mapper == nil {
		mapper = inboxOnly
	}
	reply, ok := mapper(q.ReplySubject)
	if !ok {
		return
	}
	s.obs.Query(AgentQuery{ID: q.ID, ReplySubject: reply, Prompt: q.Prompt, Agent: s.target.name, At: time.Now()})
	s.asking = true
}

// inboxOnly keeps a reply subject only when it is an _INBOX one: in an
// account sagad shares with agents, an answer published on a subject the
// agent names could otherwise land on any of sagad's own (saga.>, $JS.>).
func inboxOnly(reply string) (string, bool) {
	return reply, strings.HasPrefix(reply, "_INBOX.") && agentproto.LiteralSubject(reply)
}

// serviceError maps an error frame (§9): 408, 409, 429 and 5xx are worth
// another attempt, any other code halts with the code and description as
// the finding.
func (s *agentStream) serviceError(code int, desc string) error {
	retry := code == 408 || code == 409 || code == 429 || code >= 500
	msg := fmt.Sprintf("agent error %d: %s", code, desc)
	err := s.fail(msg, retry, false)
	if f, ok := err.(*FailedError); ok {
		f.Finding = msg
	}
	return err
}

// fail is the call's failure with the usage so far.
func (s *agentStream) fail(detail string, retryable, timeout bool) error {
	return &FailedError{Detail: s.who + ": " + detail, Usage: s.usage(), Retryable: retryable, Timeout: timeout}
}

func (s *agentStream) outcome() agentOutcome {
	return agentOutcome{text: s.text.String(), usage: s.usage()}
}

// usage is what the call is charged: the dollars the agent reported, its
// tokens when it reported some, else an estimate marked as one.
func (s *agentStream) usage() capsule.Usage {
	if s.reported {
		return capsule.Usage{Tokens: s.tokens, Dollars: s.dollars}
	}
	return capsule.Usage{Tokens: EstimateTokens(s.promptBytes + s.text.Len()), Dollars: s.dollars, Estimated: true}
}

// report tells the observer, at most every progressEvery (what it holds
// back goes once the stream is quiet: an agent waiting for an answer shows
// its whole stream so far), and always at the end.
func (s *agentStream) report(final bool) {
	now := time.Now()
	if !final && now.Sub(s.lastSent) < progressEvery {
		s.held = true
		return
	}
	s.lastSent, s.held = now, false
	p := s.progress
	p.Done = final
	p.Text = tailText(s.text.String(), MaxProgressText)
	s.obs.Progress(p)
}

// tailText keeps the last n bytes of t, cut at a rune start.
func tailText(t string, n int) string {
	if len(t) <= n {
		return t
	}
	t = t[len(t)-n:]
	for len(t) > 0 && t[0]&0xC0 == 0x80 {
		t = t[1:]
	}
	return t
}
