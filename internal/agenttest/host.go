package agenttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/sagad/sagad/executors/agentproto"
)

// Config is a host's identity and behaviour.
type Config struct {
	// Agent, Owner and Session name the host (its subjects'
	// tokens). Owner defaults to "test", Session to "main".
	Agent, Owner, Session string
	// Version is the protocol_version it announces. Defaults to "0.3".
	Version string
	// MaxPayload is the prompt endpoint's max_payload. Defaults to "1MB".
	MaxPayload string
	// AttachmentsOK is the prompt endpoint's attachments_ok.
	AttachmentsOK bool
	// Heartbeat is the heartbeat interval. Defaults to 1s; negative
	// sends none.
	Heartbeat time.Duration
	// Handler answers each prompt. Defaults to [Echo].
	Handler Handler
}

// Handler answers one prompt by writing to s. The host ends the stream
// with the terminator after it returns, unless the handler did.
type Handler func(ctx context.Context, req Request, s *Stream)

// Request is a prompt as the host received it.
type Request struct {
	Envelope agentproto.Envelope
	// Header is the NATS header sagad sent (idempotency key, trace).
	Header nats.Header
}

// Host is a running agent host.
type Host struct {
	nc   *nats.Conn
	cfg  Config
	svc  micro.Service
	subj agentproto.Subject
	stop chan struct{}
	// ctx ends the handlers' contexts on Stop.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	calls  int
	beats  bool
}

// Start registers the service on nc and starts the heartbeats.
func Start(nc *nats.Conn, cfg Config) (*Host, error) {
	if cfg.Agent == "" {
		return nil, errors.New("agenttest: agent name required")
	}
	if cfg.Owner == "" {
		cfg.Owner = "test"
	}
	if cfg.Session == "" {
		cfg.Session = "main"
	}
	if cfg.Version == "" {
		cfg.Version = agentproto.ProtocolVersion
	}
	if cfg.MaxPayload == "" {
		cfg.MaxPayload = "1MB"
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = time.Second
	}
	if cfg.Handler == nil {
		cfg.Handler = Echo
	}
	h := &Host{nc: nc, cfg: cfg, subj: agentproto.Subject{Agent: cfg.Agent, Owner: cfg.Owner, Session: cfg.Session}, stop: make(chan struct{}), beats: cfg.Heartbeat > 0}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	svc, err := micro.AddService(nc, micro.Config{
		Name: agentproto.ServiceName, Version: "0.0.1", Description: cfg.Agent + " test agent",
		Metadata: map[string]string{"agent": cfg.Agent, "owner": cfg.Owner, "session": cfg.Session, "protocol_version": cfg.Version},
	})
	if err != nil {
		h.cancel()
		return nil, err
	}
	h.svc = svc
	err = svc.AddEndpoint("prompt", micro.HandlerFunc(h.prompt),
		micro.WithEndpointSubject(h.subj.Prompt()), micro.WithEndpointQueueGroup(agentproto.ServiceName),
		micro.WithEndpointMetadata(map[string]string{"max_payload": cfg.MaxPayload, "attachments_ok": strconv.FormatBool(cfg.AttachmentsOK)}))
	if err == nil {
		err = svc.AddEndpoint("status", micro.HandlerFunc(func(r micro.Request) { _ = r.Respond(h.heartbeat()) }),
			micro.WithEndpointSubject(h.subj.Status()), micro.WithEndpointQueueGroup(agentproto.ServiceName))
	}
	if err != nil {
		h.cancel()
		_ = svc.Stop()
		return nil, err
	}
	if h.beats {
		// The first beat right after registering (§8.5).
		_ = nc.Publish(h.subj.Heartbeat(), h.heartbeat())
		h.wg.Add(1)
		go h.beat()
	}
	return h, nil
}

// Subject is the host's prompt subject.
func (h *Host) Subject() string { return h.subj.Prompt() }

// Calls is how many prompts the host received.
func (h *Host) Calls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls
}

// StopHeartbeats stops the heartbeats while the service keeps serving: an
// agent that went silent.
func (h *Host) StopHeartbeats() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.beats {
		h.beats = false
		close(h.stop)
	}
}

// Stop ends the heartbeats and the service.
func (h *Host) Stop() {
	h.StopHeartbeats()
	h.cancel()
	h.wg.Wait()
	_ = h.svc.Stop()
}

func (h *Host) beat() {
	defer h.wg.Done()
	t := time.NewTicker(h.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			_ = h.nc.Publish(h.subj.Heartbeat(), h.heartbeat())
		}
	}
}

func (h *Host) heartbeat() []byte {
	b, _ := json.Marshal(agentproto.Heartbeat{
		Agent: h.cfg.Agent, Owner: h.cfg.Owner, Session: h.cfg.Session, InstanceID: h.svc.Info().ID,
		TS: time.Now().UTC().Format(time.RFC3339Nano), IntervalS: h.cfg.Heartbeat.Seconds(),
	})
	return b
}

// prompt decodes the request (envelope or plain text, §5.3) and runs the
// handler on a goroutine of its own, so that the endpoint serves the next
// prompt meanwhile.
func (h *Host) prompt(r micro.Request) {
	h.mu.Lock()
	h.calls++
	h.mu.Unlock()
	s := &Stream{nc: h.nc, reply: r.Reply()}
	var env agentproto.Envelope
	if json.Unmarshal(r.Data(), &env) != nil || env.Prompt == "" {
		env = agentproto.Envelope{Prompt: string(r.Data())}
	}
	if env.Prompt == "" {
		s.Error(400, "empty prompt")
		return
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		ctx, cancel := context.WithTimeout(h.ctx, time.Minute)
		defer cancel()
		h.cfg.Handler(ctx, Request{Envelope: env, Header: nats.Header(r.Headers())}, s)
		s.End()
	}()
}

// Stream is one prompt's response stream.
type Stream struct {
	nc    *nats.Conn
	reply string
	mu    sync.Mutex
	ended bool
}

func (s *Stream) chunk(typ string, data any) {
	b, _ := json.Marshal(map[string]any{"type": typ, "data": data})
	s.Raw(b)
}

// Raw sends b as one message of the stream, as it is.
func (s *Stream) Raw(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		_ = s.nc.Publish(s.reply, b)
	}
}

// Ack sends the status ack (first, and as keep-alive).
func (s *Stream) Ack() { s.chunk(agentproto.TypeStatus, agentproto.StatusAck) }

// Status sends a status chunk with token.
func (s *Stream) Status(token string) { s.chunk(agentproto.TypeStatus, token) }

// Text sends a response chunk in the bare-string form.
func (s *Stream) Text(t string) { s.chunk(agentproto.TypeResponse, t) }

// TextObject sends a response chunk in the {text, attachments} form.
func (s *Stream) TextObject(t string) {
	s.chunk(agentproto.TypeResponse, map[string]any{"text": t, "attachments": []any{}})
}

// Unknown sends a chunk of a type no caller knows.
func (s *Stream) Unknown() { s.chunk("thinking", map[string]any{"note": "hmm"}) }

// Cost sends the Claude Code host's cost status.
func (s *Stream) Cost(turn float64) {
	s.Status(fmt.Sprintf(`cost:{"turn_cost_usd":%v,"total_cost_usd":%v}`, turn, turn))
}

// Usage sends a usage status with token counts.
func (s *Stream) Usage(in, out int64) {
	s.Status(fmt.Sprintf(`usage:{"input_tokens":%d,"output_tokens":%d}`, in, out))
}

// Ask sends a query chunk and waits for its answer on a fresh inbox of the
// host's connection (the stock hosts' way); ok is false when ctx ends
// first.
func (s *Stream) Ask(ctx context.Context, id, prompt string) (answer string, ok bool) {
	inbox := s.nc.NewInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return "", false
	}
	defer func() { _ = sub.Unsubscribe() }()
	s.chunk(agentproto.TypeQuery, agentproto.Query{ID: id, ReplySubject: inbox, Prompt: prompt})
	m, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return "", false
	}
	var env agentproto.Envelope
	if json.Unmarshal(m.Data, &env) == nil && env.Prompt != "" {
		return env.Prompt, true
	}
	return string(m.Data), true
}

// Error sends an error frame (§9) and the terminator.
func (s *Stream) Error(code int, desc string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	_ = s.nc.PublishMsg(&nats.Msg{Subject: s.reply, Header: nats.Header{
		agentproto.ErrorCodeHeader: {strconv.Itoa(code)}, agentproto.ErrorHeader: {desc},
	}})
	_ = s.nc.Publish(s.reply, nil)
	s.ended = true
}

// End sends the terminator (an empty body, no headers) once.
func (s *Stream) End() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		_ = s.nc.Publish(s.reply, nil)
		s.ended = true
	}
}

// Echo acks, then answers with the prompt's first line in two chunks, one
// of each form, with an unknown chunk between them.
func Echo(_ context.Context, req Request, s *Stream) {
	s.Ack()
	s.Text("# Answer\n\n")
	s.Unknown()
	s.TextObject("You asked: " + firstLine(req.Envelope.Prompt) + "\n")
}

func firstLine(s string) string {
	for i, c := range s {
		if c == '\n' {
			return s[:i]
		}
	}
	return s
}
