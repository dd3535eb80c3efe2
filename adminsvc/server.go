package adminsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/microreply"
	"github.com/sagad/sagad/rules"
	sagastatus "github.com/sagad/sagad/status"
	"github.com/sagad/sagad/store"
)

// Actions are the operator actions the service carries out; *admin.Admin
// implements them (sagad passes its pipeline's Admin, so the actions are
// counted in that sagad's metrics).
type Actions interface {
	Pause(ctx context.Context, id, reason, by string) (client.Status, error)
	Resume(ctx context.Context, id string, opts admin.ResumeOptions) (client.Status, error)
	Cancel(ctx context.Context, id, reason, by string) (client.Status, error)
	Decide(ctx context.Context, id, decision, rationale, by string) (client.Status, error)
	PausePhaseBy(ctx context.Context, ph capsule.Phase, by, reason string) error
	ResumePhase(ctx context.Context, ph capsule.Phase) error
	Phases(ctx context.Context) ([]admin.PhaseState, error)
	Pending(ctx context.Context) ([]admin.PendingItem, error)
	Replay(ctx context.Context, id string, opts admin.ReplayOptions) (admin.ReplayResult, error)
	PreviewReplay(ctx context.Context, id string, opts admin.ReplayOptions) (admin.ReplayPreview, error)
}

var _ Actions = (*admin.Admin)(nil)

// Config tunes the service.
type Config struct {
	// Timeout bounds each request's handling. Defaults to 30s.
	Timeout time.Duration
	// MaxRequestBytes bounds a request's body; larger ones are refused
	// with bad_request. Defaults to [DefaultMaxRequestBytes] (64 KiB).
	MaxRequestBytes int
	// Logger logs every request answered. Defaults to discarding.
	Logger *slog.Logger
	// Metadata is added to the micro service's metadata (e.g. the sagad
	// instance). Defaults to none.
	Metadata map[string]string
	// Rules is the constitution this sagad enforces, answered on
	// saga.admin.rules (sagad passes its pipeline's). Defaults to the
	// built-in defaults.
	Rules rules.Config
	// Chains answers saga.admin.chain (sagad passes [StoreChains]).
	// Defaults to none: the verb is answered internal.
	Chains ChainReader
	// Costs answers saga.admin.cost (sagad passes [StoreCosts]). Defaults
	// to none: the verb is answered internal.
	Costs CostReader
	// Calls are the agent calls this sagad runs (sagad passes its
	// pipeline's): saga.admin.status shows the capsule's as "call". Nil:
	// none is shown.
	Calls *sagastatus.Calls
	// Agents answers saga.admin.agents (sagad passes an [*AgentWatch]).
	// Defaults to none: the verb is answered internal.
	Agents AgentDirectory
	// Compositions answers the composition verbs (sagad passes
	// [StoreCompositions]). Defaults to none: they are answered internal.
	Compositions *Compositions
	// Models answers saga.admin.models: the model tiers, prices and
	// endpoints of sagad's config (sagad passes its executors config's
	// [executors.Config.ModelsReport], which holds no key or header).
	// Nil: the verb is answered internal.
	Models *executors.ModelsReport
}

// DefaultTimeout bounds a request's handling unless Config.Timeout says
// otherwise.
const DefaultTimeout = 30 * time.Second

func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// Service is one sagad's instance of the admin service.
type Service struct {
	svc micro.Service
	a   Actions
	cfg Config
	log *slog.Logger

	// base parents every request's context; Stop cancels it once the
	// requests in progress have had their chance to finish.
	base   context.Context
	cancel context.CancelFunc
	// running is read-held by every request in progress, so Stop can wait
	// for them by taking it.
	running sync.RWMutex
	// nc answers the waiting requests, served on goroutines of their own.
	nc *nats.Conn
	// polls holds a token per waiting request in progress (maxLongPolls).
	polls chan struct{}
}

// Start registers the service on nc and answers requests until Stop (or
// until nc closes). Requests go to a, each under cfg.Timeout.
func Start(nc *nats.Conn, a Actions, cfg Config) (*Service, error) {
	if nc == nil || a == nil {
		return nil, errors.New("adminsvc: a connection and actions are required")
	}
	cfg = cfg.withDefaults()
	s := &Service{nc: nc, a: a, cfg: cfg, log: cfg.Logger, polls: make(chan struct{}, maxLongPolls)}
	s.base, s.cancel = context.WithCancel(context.Background())
	svc, err := micro.AddService(nc, micro.Config{
		Name:        Name,
		Version:     Version,
		Description: "sagad admin API: pause, resume, cancel, decide, replay, phase pause/resume/list, pending, rules, models, wave set/show/list/close, chain, cost, agents, status, list, history, report, wait, events",
		Metadata:    cfg.Metadata,
	})
	if err != nil {
		s.cancel()
		return nil, fmt.Errorf("adminsvc: add service: %w", err)
	}
	for _, verb := range Verbs {
		// Endpoint names may not contain dots; subjects do.
		name := endpointName(verb)
		if err := svc.AddEndpoint(name, s.handler(verb), micro.WithEndpointSubject(Subject(verb))); err != nil {
			_ = svc.Stop()
			s.cancel()
			return nil, fmt.Errorf("adminsvc: endpoint %s: %w", Subject(verb), err)
		}
	}
	s.svc = svc
	// Return once the server has the endpoints' subscriptions: a request
	// sent right after Start (from any connection) finds a responder.
	if err := nc.Flush(); err != nil {
		_ = svc.Stop()
		s.cancel()
		return nil, fmt.Errorf("adminsvc: flush the endpoints' subscriptions: %w", err)
	}
	return s, nil
}

func endpointName(verb string) string {
	b := []byte(verb)
	for i, c := range b {
		if c == '.' {
			b[i] = '_'
		}
	}
	return string(b)
}

// ID is this instance's micro service id.
func (s *Service) ID() string { return s.svc.Info().ID }

// Stop stops taking requests and waits for those in progress until ctx is
// done, then cancels them. A request already delivered to this instance
// when it stops is still answered (with internal if it was cancelled).
func (s *Service) Stop(ctx context.Context) error {
	err := s.svc.Stop()
	idle := make(chan struct{})
	go func() {
		// Taking the lock is the wait: every request holds it for reading.
		s.running.Lock()
		s.running.Unlock() //nolint:staticcheck // SA2001: the empty section is the point

		close(idle)
	}()
	select {
	case <-idle:
		s.cancel()
	case <-ctx.Done():
		s.cancel()
		<-idle // cancelled requests return promptly
	}
	if err != nil {
		return fmt.Errorf("adminsvc: stop: %w", err)
	}
	return nil
}

// handler answers verb's requests. micro calls it on the endpoint's own
// subscription goroutine, so one sagad handles one request per verb at a
// time; the queue group spreads requests over the sagads.
func (s *Service) handler(verb string) micro.Handler {
	if longPoll[verb] {
		// A waiting request is answered on a goroutine of its own: micro
		// hands an endpoint's requests over one at a time.
		inner := s.answer(verb)
		return micro.HandlerFunc(func(req micro.Request) {
			select {
			case s.polls <- struct{}{}:
			default:
				s.refuseBusy(verb, req)
				return
			}
			s.running.RLock()
			go func() {
				defer func() { <-s.polls }()
				defer s.running.RUnlock()
				// Answered after the handler returned: through a copy
				// micro does not read (see package microreply).
				inner(microreply.Detach(s.nc, req))
			}()
		})
	}
	inner := s.answer(verb)
	return micro.HandlerFunc(func(req micro.Request) {
		s.running.RLock()
		defer s.running.RUnlock()
		inner(req)
	})
}

// refuseBusy answers a waiting request past [maxLongPolls].
func (s *Service) refuseBusy(verb string, req micro.Request) {
	e := ErrorReply{Code: CodeInternal, Message: fmt.Sprintf("this sagad holds %d waiting requests already: ask again", maxLongPolls)}
	body, _ := json.Marshal(e)
	if err := req.Error(headerCodes[e.Code], e.Message, body); err != nil {
		s.log.Warn("admin reply", "subject", req.Subject(), "error", err)
	}
	s.log.Warn("admin request refused", "verb", verb, "code", e.Code, "error", e.Message)
}

// answer answers one request of verb; the caller holds s.running.
func (s *Service) answer(verb string) func(micro.Request) {
	return func(req micro.Request) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(s.base, s.cfg.Timeout)
		defer cancel()
		reply, err := s.serve(ctx, verb, req.Data())
		if err == nil {
			b, merr := json.Marshal(reply)
			if merr == nil {
				if rerr := req.Respond(b); rerr != nil {
					s.log.Warn("admin reply", "subject", req.Subject(), "error", rerr)
				}
				s.log.Info("admin request", "verb", verb, "took", time.Since(start))
				return
			}
			err = fmt.Errorf("encode reply: %w", merr)
		}
		e := s.classify(ctx, err)
		if e.Message == "" {
			e.Message = e.Code // micro refuses an empty description
		}
		body, _ := json.Marshal(e)
		if rerr := req.Error(headerCodes[e.Code], e.Message, body); rerr != nil {
			s.log.Warn("admin reply", "subject", req.Subject(), "error", rerr)
		}
		level := slog.LevelInfo
		if e.Code == CodeInternal {
			level = slog.LevelWarn
		}
		s.log.Log(ctx, level, "admin request refused", "verb", verb, "code", e.Code, "error", e.Message, "took", time.Since(start))
	}
}

// serve decodes and carries out one request.
func (s *Service) serve(ctx context.Context, verb string, data []byte) (any, error) {
	r, err := decodeRequest(verb, data, s.cfg.MaxRequestBytes)
	if err != nil {
		return nil, err
	}
	if reply, ok, err := s.serveWave(ctx, r); ok {
		return reply, err
	}
	if reply, ok, err := s.serveRead(ctx, r); ok {
		return reply, err
	}
	if reply, ok, err := s.serveComposition(ctx, r); ok {
		return reply, err
	}
	switch r := r.(type) {
	case ChainRequest:
		return s.serveChain(ctx, r)
	case CostRequest:
		return s.serveCost(ctx, r)
	case AgentsRequest:
		return s.serveAgents(ctx, r)
	case PauseRequest:
		return s.a.Pause(ctx, r.ID, r.Reason, r.By)
	case ResumeRequest:
		opts := admin.ResumeOptions{
			By: r.By, Reason: r.Reason, Tokens: r.Tokens, Dollars: r.Dollars, Deadline: r.Deadline, Force: r.Force, Answer: r.Answer,
		}
		if r.Extend != "" {
			d, err := ParseExtend(r.Extend) // checked when decoded
			if err != nil {
				return nil, err
			}
			opts.Extend = d
		}
		return s.a.Resume(ctx, r.ID, opts)
	case CancelRequest:
		return s.a.Cancel(ctx, r.ID, r.Reason, r.By)
	case DecideRequest:
		return s.a.Decide(ctx, r.ID, r.Decision, r.Rationale, r.By)
	case ReplayRequest:
		opts := admin.ReplayOptions{By: r.By, Reason: r.Reason, Dependents: r.Dependents == nil || *r.Dependents, Token: r.RequestID}
		if r.FromPhase != nil {
			ph := capsule.Phase(*r.FromPhase)
			opts.From = &ph
		}
		if r.Capsule != nil {
			opts.Capsule = []byte(r.Capsule)
		}
		if verb == VerbReplayPreview {
			return s.a.PreviewReplay(ctx, r.ID, opts)
		}
		return s.a.Replay(ctx, r.ID, opts)
	case PhaseRequest:
		ph := capsule.Phase(r.Phase)
		if verb == VerbPhasePause {
			err = s.a.PausePhaseBy(ctx, ph, r.By, r.Reason)
		} else {
			err = s.a.ResumePhase(ctx, ph)
		}
		if err != nil {
			return nil, err
		}
		s.log.Info("admin phase "+verb, "phase", ph.String(), "by", r.By, "reason", r.Reason)
		return s.phases(ctx)
	case listRequest:
		switch verb {
		case VerbPhaseList:
			return s.phases(ctx)
		case VerbRules:
			return rules.InForce(s.cfg.Rules), nil
		case VerbModels:
			return s.serveModels()
		}
		items, err := s.a.Pending(ctx)
		if err != nil {
			return nil, err
		}
		if items == nil {
			items = []admin.PendingItem{}
		}
		reply := PendingReply{Items: items}
		states, err := s.a.Phases(ctx)
		if err != nil {
			return nil, err
		}
		reply.Phases = admin.PausedPhases(states)
		if c := s.cfg.Compositions; c != nil {
			if reply.Compositions, err = compose.Waiting(ctx, c.st, maxCompositionsPending); err != nil {
				return nil, err
			}
		}
		return reply, nil
	}
	return nil, fmt.Errorf("unhandled request %T", r)
}

func (s *Service) phases(ctx context.Context) (PhasesReply, error) {
	list, err := s.a.Phases(ctx)
	if err != nil {
		return PhasesReply{}, err
	}
	if list == nil {
		list = []admin.PhaseState{}
	}
	return PhasesReply{Phases: list}, nil
}

// maxCompositionsPending bounds the composition runs pending reads.
const maxCompositionsPending = 1000

// classify maps an action's error to its answer.
func (s *Service) classify(ctx context.Context, err error) ErrorReply {
	var re *requestError
	switch {
	case errors.As(err, &re):
		return ErrorReply{Code: CodeBadRequest, Message: re.msg}
	case errors.Is(err, admin.ErrRefused), errors.Is(err, compose.ErrEnded), errors.Is(err, compose.ErrNotEnded), errors.Is(err, compose.ErrNotGated),
		errors.Is(err, compose.ErrLoopWaits), errors.Is(err, compose.ErrLoopReplay):
		return ErrorReply{Code: CodeRefused, Message: err.Error()}
	case errors.Is(err, store.ErrNotFound):
		return ErrorReply{Code: CodeNotFound, Message: err.Error()}
	case errors.Is(err, compose.ErrAmbiguous):
		return ErrorReply{Code: CodeBadRequest, Message: err.Error()}
	case errors.Is(err, admin.ErrInvalidWave), errors.Is(err, admin.ErrInvalidQuery):
		return ErrorReply{Code: CodeBadRequest, Message: err.Error()}
	case s.base.Err() != nil:
		return ErrorReply{Code: CodeInternal, Message: "sagad is shutting down: " + err.Error()}
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return ErrorReply{Code: CodeInternal, Message: fmt.Sprintf("not done within %s: %v", s.cfg.Timeout, err)}
	}
	return ErrorReply{Code: CodeInternal, Message: err.Error()}
}
