package artifactsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/microreply"
)

// Subject is the service's subject in sagad's account; every worker
// account imports it.
const Subject = "saga.artifacts.get"

// Service names and versions the micro service.
const (
	Name    = "sagad-artifacts"
	Version = "1.0.0"
)

// Error codes of an error reply (with the micro status in brackets).
const (
	CodeBadRequest = "bad_request" // 400
	CodeForbidden  = "forbidden"   // 403: wrong token, or a ref the call does not name
	CodeNotFound   = "not_found"   // 404: granted, but no longer stored
	CodeInternal   = "internal"    // 500
)

// MaxRequestBytes bounds a request: a ref, a token and two numbers.
const MaxRequestBytes = 4 << 10

// Request asks for a page of one artifact's content.
type Request struct {
	// Ref is the artifact, "artifact:<capsule_id>/<cycle>". Required.
	Ref string `json:"ref"`
	// Token is the current call's completion_token (an executor's) or
	// call_token (a reviewer's). Required.
	Token string `json:"token"`
	// Offset is the first content byte wanted. Defaults to 0.
	Offset int64 `json:"offset,omitempty"`
	// Limit is the most content bytes wanted; 0 or more than fits one
	// message means as many as fit.
	Limit int64 `json:"limit,omitempty"`
}

// Reply is a page of an artifact's content.
type Reply struct {
	Ref       string `json:"ref"`
	MediaType string `json:"media_type,omitempty"`
	// Size and SHA256 are the whole content's, on every page.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Offset int64  `json:"offset"`
	// Data is this page's bytes of the content (base64 in JSON).
	Data []byte `json:"data"`
	// EOF says this page ends the content.
	EOF bool `json:"eof"`
}

// ErrorReply is the body of an error answer.
type ErrorReply struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Loader reads stored artifacts (store.Artifacts).
type Loader interface {
	Get(ctx context.Context, ref string) (capsule.Artifact, error)
}

// Config tunes the service.
type Config struct {
	// Logger logs refusals. Defaults to discarding.
	Logger *slog.Logger
	// Timeout bounds each request's handling. Defaults to 30s.
	Timeout time.Duration
	// NotMineDelay is how long a sagad that holds no grant for a request's
	// token waits before refusing it: every sagad of a deployment gets
	// every request (no queue group), the one whose phase runs the call
	// answers at once, and the requester takes the first answer. Defaults
	// to 500ms.
	NotMineDelay time.Duration
	// MaxDelayed bounds the refusals waiting out NotMineDelay. One
	// goroutine answers them in turn, so requests with tokens no sagad
	// holds (a worker guessing, or flooding) cost a bounded queue, not a
	// goroutine each; past the bound a request with a token this sagad
	// does not hold gets no answer from it (the holder, if any, answers;
	// otherwise the requester times out). Defaults to [DefaultMaxDelayed].
	MaxDelayed int
}

// DefaultMaxDelayed is [Config.MaxDelayed]'s default: a second's worth of
// refusals at 2,000 requests a second, a few MiB at most.
const DefaultMaxDelayed = 1024

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	if c.NotMineDelay <= 0 {
		c.NotMineDelay = 500 * time.Millisecond
	}
	if c.MaxDelayed <= 0 {
		c.MaxDelayed = DefaultMaxDelayed
	}
	return c
}

// delayedRefusal is a refusal answered once due.
type delayedRefusal struct {
	req micro.Request
	r   *refusal
	due time.Time
}

// Service is one sagad's instance of the artifacts service.
type Service struct {
	svc     micro.Service
	stop    chan struct{}
	stopped sync.Once
	waiting sync.WaitGroup
	// nc answers the refusals sent after a delay, from refuseLater.
	nc *nats.Conn
	// delayed queues the refusals waiting out NotMineDelay, in the order
	// they fall due (every one waits the same delay).
	delayed chan delayedRefusal
	// dropped counts the refusals the full queue left unanswered.
	dropped atomic.Int64
	grants  *Grants
	load    Loader
	cfg     Config
	// page is the most content bytes one answer carries: base64 and the
	// JSON around it must fit the server's max payload.
	page int64
}

// Start serves saga.artifacts.get on nc until Stop, from load, to the
// holders of grants.
func Start(nc *nats.Conn, grants *Grants, load Loader, cfg Config) (*Service, error) {
	if nc == nil || grants == nil || load == nil {
		return nil, errors.New("artifactsvc: a connection, grants and a loader are required")
	}
	s := &Service{nc: nc, grants: grants, load: load, cfg: cfg.withDefaults(), stop: make(chan struct{})}
	s.delayed = make(chan delayedRefusal, s.cfg.MaxDelayed)
	s.page = max((nc.MaxPayload()-2048)/4*3, 1024)
	svc, err := micro.AddService(nc, micro.Config{
		Name: Name, Version: Version,
		Description: "sagad artifacts: a worker fetches the artifacts its current call names, with the call's token",
	})
	if err != nil {
		return nil, fmt.Errorf("artifactsvc: add service: %w", err)
	}
	// No queue group: grants live in the memory of the sagad that made the
	// call, so every sagad hears every request (see Config.NotMineDelay).
	if err := svc.AddEndpoint("get", micro.HandlerFunc(s.handle), micro.WithEndpointSubject(Subject), micro.WithEndpointQueueGroupDisabled()); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("artifactsvc: endpoint %s: %w", Subject, err)
	}
	if err := nc.Flush(); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("artifactsvc: flush: %w", err)
	}
	s.svc = svc
	s.waiting.Add(1)
	go s.refuseLater()
	return s, nil
}

// refuseLater answers the delayed refusals as they fall due, until Stop.
func (s *Service) refuseLater() {
	defer s.waiting.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		var d delayedRefusal
		select {
		case d = <-s.delayed:
		case <-s.stop:
			return
		}
		if wait := time.Until(d.due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-s.stop:
				return
			}
		}
		s.refuse(d.req, d.r)
	}
}

// Dropped is how many refusals the full queue left unanswered.
func (s *Service) Dropped() int64 { return s.dropped.Load() }

// Stop stops taking requests.
func (s *Service) Stop() error {
	err := s.svc.Stop()
	s.stopped.Do(func() { close(s.stop) })
	s.waiting.Wait()
	return err
}

type refusal struct {
	code, status, msg string
	// notMine: this sagad holds no grant of the token.
	notMine bool
}

func (r *refusal) Error() string { return r.msg }

// DecodeRequest parses and checks a request's bytes.
func DecodeRequest(data []byte) (Request, error) {
	var r Request
	if len(data) > MaxRequestBytes {
		return r, fmt.Errorf("request of %d bytes exceeds %d", len(data), MaxRequestBytes)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, fmt.Errorf("request: %w", err)
	}
	if dec.More() {
		return r, errors.New("request: trailing data after the object")
	}
	id, cycle, ok := strings.Cut(strings.TrimPrefix(r.Ref, "artifact:"), "/")
	switch {
	case !strings.HasPrefix(r.Ref, "artifact:") || !ok || id == "" || cycle == "":
		return r, fmt.Errorf("ref %q: want artifact:<capsule_id>/<cycle>", r.Ref)
	case r.Token == "":
		return r, errors.New("token is required: the current call's completion_token or call_token")
	case r.Offset < 0 || r.Limit < 0:
		return r, errors.New("offset and limit must not be negative")
	}
	return r, nil
}

func (s *Service) handle(req micro.Request) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	reply, err := s.serve(ctx, req.Data())
	if err == nil {
		if rerr := req.RespondJSON(reply); rerr != nil {
			s.cfg.Logger.Warn("artifacts reply", "error", rerr)
		}
		return
	}
	var r *refusal
	if !errors.As(err, &r) {
		r = &refusal{code: CodeInternal, status: "500", msg: err.Error()}
	}
	if r.notMine {
		// Another sagad may hold the call: let it answer first, without
		// holding up the requests behind this one. Answered after handle
		// returned: through a copy micro does not read (see package
		// microreply).
		select {
		case s.delayed <- delayedRefusal{req: microreply.Detach(s.nc, req), r: r, due: time.Now().Add(s.cfg.NotMineDelay)}:
		default:
			if n := s.dropped.Add(1); n == 1 || n%1000 == 0 {
				s.cfg.Logger.Warn("artifact fetches with tokens this sagad does not hold: refusals queue full, left unanswered",
					"dropped_total", n, "max_delayed", s.cfg.MaxDelayed)
			}
		}
		return
	}
	s.refuse(req, r)
}

func (s *Service) refuse(req micro.Request, r *refusal) {
	body, _ := json.Marshal(ErrorReply{Code: r.code, Message: r.msg})
	if rerr := req.Error(r.status, r.msg, body); rerr != nil {
		s.cfg.Logger.Warn("artifacts reply", "error", rerr)
	}
	s.cfg.Logger.Info("artifact fetch refused", "code", r.code, "error", r.msg)
}

func (s *Service) serve(ctx context.Context, data []byte) (Reply, error) {
	r, err := DecodeRequest(data)
	if err != nil {
		return Reply{}, &refusal{code: CodeBadRequest, status: "400", msg: err.Error()}
	}
	if why, ok, known := s.grants.check(r.Token, r.Ref); !ok {
		return Reply{}, &refusal{code: CodeForbidden, status: "403", msg: why, notMine: !known}
	}
	a, err := s.load.Get(ctx, r.Ref)
	if errors.Is(err, capsule.ErrArtifactGone) {
		return Reply{}, &refusal{code: CodeNotFound, status: "404", msg: r.Ref + " is no longer stored"}
	}
	if err != nil {
		return Reply{}, err
	}
	size := int64(len(a.Content))
	if r.Offset > size {
		return Reply{}, &refusal{code: CodeBadRequest, status: "400", msg: fmt.Sprintf("offset %d is past the content's %d bytes", r.Offset, size)}
	}
	n := s.page
	if r.Limit > 0 {
		n = min(n, r.Limit)
	}
	end := min(size, r.Offset+n)
	return Reply{
		Ref: r.Ref, MediaType: a.MediaType, Size: size, SHA256: a.SHA256,
		Offset: r.Offset, Data: a.Content[r.Offset:end], EOF: end == size,
	}, nil
}
