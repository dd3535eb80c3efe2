package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/locks"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/phases"
)

// Pipeline runs the seven phases of the saga for one sagad process. Several
// pipelines (processes) may share one NATS system: they share the durable
// consumers and coordinate through checkpoint compare-and-set.
type Pipeline struct {
	cfg           Config
	js            jetstream.JetStream
	log           *slog.Logger
	stores        *stores
	checkpoints   *Checkpoints
	cache         *cpCache
	continuations *Continuations
	metrics       *metrics.Metrics
	locks         *locks.Manager
	env           *phases.Env
	phases        [capsule.NumPhases]phases.Phase

	mu         sync.Mutex
	running    []*phaseRunner
	cancel     context.CancelFunc
	sweeperEnd chan struct{}
}

// New creates the JetStream topology (idempotently) and returns a pipeline
// ready to [Pipeline.Start].
func New(ctx context.Context, js jetstream.JetStream, cfg Config) (*Pipeline, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("pipeline: config: %w", err)
	}
	if jspub.Conn(js) == nil {
		// The hot path writes to the buckets' own subjects (internal/jspub).
		return nil, errors.New("pipeline: JetStream domains are not supported: connect without one")
	}
	st, err := ensureTopology(ctx, js, cfg)
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	lm, err := locks.New(ctx, js, locks.Config{Lease: cfg.LockLease, Replicas: cfg.Replicas, Storage: cfg.Storage, Now: cfg.Now})
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	bt, err := budget.New(ctx, js, budget.Config{Replicas: cfg.Replicas, Storage: cfg.Storage})
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	p := &Pipeline{
		cfg:           cfg,
		js:            js,
		log:           cfg.Logger,
		stores:        st,
		checkpoints:   &Checkpoints{kv: st.checkpoints, js: js, ttl: cfg.Retention},
		cache:         newCache(),
		continuations: &Continuations{kv: st.continuations},
		metrics:       cfg.Metrics,
		locks:         lm,
	}
	p.env = &phases.Env{
		Locks:          lm,
		Budgets:        budgets{bt},
		Resolver:       &resolver{workspace: cfg.Workspace, js: js, artifacts: st.artifacts},
		Artifacts:      newArtifactStore(st.artifacts, js),
		Executors:      cfg.Executors,
		Rules:          cfg.Rules,
		Facts:          &facts{checkpoints: p.checkpoints, capsules: st.capsules, budgets: bt},
		Logger:         cfg.Logger,
		Metrics:        cfg.Metrics,
		MaxIntakeBytes: cfg.MaxIntakeBytes,
		Now:            cfg.Now,
		RetryDelay:     cfg.RetryDelay,
		LockWait:       cfg.LockWait,
		BudgetWarning:  max(cfg.BudgetWarning, 0),
	}
	p.phases = [capsule.NumPhases]phases.Phase{
		nil, // RECEPTION has its own entry point, phases.Receive.
		phases.RealityAnchor{},
		phases.Planning{},
		phases.AutomatedGates{},
		phases.Execution{Heartbeat: cfg.Heartbeat},
		phases.Review{},
		phases.Handoff{},
	}
	return p, nil
}

// Checkpoints gives read access to the checkpoint store.
func (p *Pipeline) Checkpoints() *Checkpoints { return p.checkpoints }

// Start begins consuming every phase. It returns once all consumers run.
func (p *Pipeline) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running != nil {
		return errors.New("pipeline: already started")
	}
	// Work outlives the caller's ctx on purpose: Stop drains it.
	workCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	for ph := capsule.Phase(0); ph < capsule.NumPhases; ph++ {
		r, err := p.startConsumer(ctx, workCtx, PhaseStream(ph), ConsumerName(ph), func(ctx context.Context, msg jetstream.Msg) {
			p.handle(ctx, ph, msg)
		})
		if err != nil {
			cancel()
			for _, r := range p.running {
				r.stop()
			}
			p.running = nil
			return fmt.Errorf("pipeline: start %s: %w", ph, err)
		}
		p.running = append(p.running, r)
	}
	r, err := p.startConsumer(ctx, workCtx, CompletionsStream, CompletionsConsumer, func(ctx context.Context, msg jetstream.Msg) {
		p.settle(msg, CompletionsConsumer, p.complete(ctx, msg))
	})
	if err != nil {
		cancel()
		for _, r := range p.running {
			r.stop()
		}
		p.running = nil
		return fmt.Errorf("pipeline: start completions: %w", err)
	}
	p.running = append(p.running, r)
	p.sweeperEnd = make(chan struct{})
	go p.runSweeper(workCtx, p.sweeperEnd)
	p.log.Info("pipeline started", "instance", p.cfg.InstanceID, "workers", p.cfg.Workers, "workspace", p.cfg.Workspace)
	return nil
}

// Stop stops fetching, lets in-flight phases finish (or hands their messages
// back when ctx expires first), and returns when no work is left.
func (p *Pipeline) Stop(ctx context.Context) {
	p.mu.Lock()
	running, cancel, sweeperEnd := p.running, p.cancel, p.sweeperEnd
	p.running, p.cancel = nil, nil
	p.mu.Unlock()
	if running == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, r := range running {
			wg.Add(1)
			go func() { defer wg.Done(); r.stop() }()
		}
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		// Interrupted work returns Retry and is naked: another instance, or
		// this one after restart, takes it up. An executor that ignores its
		// context is not waited for beyond a last grace: its message was
		// never acked, so it is redelivered.
		cancel()
		select {
		case <-done:
		case <-time.After(stopGrace):
			p.log.Warn("pipeline stopped with work still running", "instance", p.cfg.InstanceID)
		}
	}
	cancel()
	<-sweeperEnd
	p.log.Info("pipeline stopped", "instance", p.cfg.InstanceID)
}

// phaseRunner consumes one durable consumer with a bounded pool of workers.
type phaseRunner struct {
	cc   jetstream.ConsumeContext
	work chan jetstream.Msg
	wg   sync.WaitGroup
}

func (p *Pipeline) startConsumer(ctx, workCtx context.Context, stream, consumer string, handle func(context.Context, jetstream.Msg)) (*phaseRunner, error) {
	cons, err := p.js.Consumer(ctx, stream, consumer)
	if err != nil {
		return nil, err
	}
	r := &phaseRunner{work: make(chan jetstream.Msg)}
	for i := 0; i < p.cfg.Workers; i++ {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for msg := range r.work {
				handle(workCtx, msg)
			}
		}()
	}
	r.cc, err = cons.Consume(func(msg jetstream.Msg) { r.work <- msg },
		jetstream.PullMaxMessages(p.cfg.Workers),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				p.log.Warn("consume", "consumer", consumer, "error", err)
			}
		}))
	if err != nil {
		close(r.work)
		r.wg.Wait()
		return nil, err
	}
	return r, nil
}

// drainGrace bounds how long stop waits for a drain. A pull request the
// server holds (an idle or just-resumed consumer) only ends at its expiry;
// after the grace the consumer is stopped, and messages it had buffered are
// redelivered after AckWait.
const drainGrace = 2 * time.Second

// stopGrace is how long Stop still waits for work after its context ended.
const stopGrace = 5 * time.Second

func (r *phaseRunner) stop() {
	r.cc.Drain()
	select {
	case <-r.cc.Closed():
	case <-time.After(drainGrace):
		r.cc.Stop()
		<-r.cc.Closed()
	}
	close(r.work)
	r.wg.Wait()
}

// budgets charges capsules outside any wave in their checkpoint alone, and
// wave capsules through the budget bucket, where the wave's total lives.
type budgets struct{ t *budget.Tracker }

func (b budgets) Charge(ctx context.Context, capsuleID, waveID, chargeID string, caps capsule.Budget, used, u capsule.Usage) (budget.ChargeResult, error) {
	if waveID == "" || u == (capsule.Usage{}) {
		// A call that consumed nothing cannot cross a cap: a wave another
		// capsule exhausted halts that capsule, not this one.
		total := used.Add(u)
		return budget.ChargeResult{Capsule: total, Exceeded: budget.Check(total, caps)}, nil
	}
	return b.t.Charge(ctx, capsuleID, waveID, chargeID, caps, u)
}
