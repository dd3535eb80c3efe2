package pipeline

import (
	"context"
	"errors"
	"fmt"
	"github.com/sagad/sagad/artifactsvc"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/internal/seqid"
	"github.com/sagad/sagad/internal/tracing"
	"github.com/sagad/sagad/maintenance"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/phases"
	"github.com/sagad/sagad/rules"
	"github.com/sagad/sagad/runner"
	"github.com/sagad/sagad/status"
	"github.com/sagad/sagad/store"
)

// Pipeline runs the seven phases of the saga for one sagad process. Several
// pipelines (processes) may share one NATS system: they share the durable
// consumers and coordinate through checkpoint compare-and-set.
type Pipeline struct {
	cfg   Config
	js    jetstream.JetStream
	log   *slog.Logger
	st    *store.Store
	admin *admin.Admin
	// corrupt reports the values of sagad's buckets sagad did not write.
	corrupt *corrupt.Reporter
	metrics *metrics.Metrics
	env     *phases.Env
	rate    *limiter
	phases  [capsule.NumPhases]phases.Phase
	tracer  *tracing.Tracer
	// tokens makes the attempts' run tokens (runToken).
	tokens *seqid.Gen
	// clock beats the attempts' heartbeats while the pipeline runs.
	clock *clock
	// constitution is the version of the rules in force
	// (rules.VersionOf), recorded in every checkpoint RECEPTION creates.
	constitution string

	// stopping is closed when Stop stops waiting for work: a delivery that
	// waits to record an agent's result gives up then (its claim lapses and
	// another instance takes the cycle over).
	stopping <-chan struct{}

	mu      sync.Mutex
	running []*runner.Consumer
	cancel  context.CancelFunc
	sweeper *maintenance.Sweeper
	rescuer *maintenance.Rescuer
	// grants are the artifacts each agent call's worker may fetch, served
	// by artifacts on saga.artifacts.get while the pipeline runs.
	grants    *artifactsvc.Grants
	artifacts *artifactsvc.Service
	// calls are the agent calls this process runs, as their streams show
	// them so far (transient: see status.Calls).
	calls *status.Calls
	// pauses is which phases a person paused, as last read (pauses.go).
	pauses pauseView
	// memo is the deferred advances this process made, for their
	// catch-up (memo.go); nil with NoDefer.
	memo *decisionMemo
	// advances are the plain advances this process applied, for the
	// catch-ups that apply them again (advances.go); nil with NoDefer.
	advances *advanceMemo
	// caughtUp counts, by phase, the deferred decisions a catch-up made
	// by running the phase (not taken from the memo): what the tests
	// hold the memo to.
	caughtUp [capsule.NumPhases]atomic.Int64
}

// New creates the JetStream topology (idempotently) and returns a pipeline
// ready to [Pipeline.Start].
func New(ctx context.Context, js jetstream.JetStream, cfg Config) (*Pipeline, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("pipeline: config: %w", err)
	}
	rep := corrupt.NewReporter(cfg.Logger, cfg.Metrics.Corrupt)
	st, err := store.Ensure(ctx, js, store.Topology{
		Replicas: cfg.Replicas, Storage: cfg.Storage, AckWait: cfg.AckWait, DuplicateWindow: cfg.DuplicateWindow,
		Retention: cfg.Retention, LockLease: cfg.LockLease, Workspace: cfg.Workspace, KVBuckets: cfg.KVBuckets, Now: cfg.Now,
		Writes:  &jspub.Writes{Timeout: cfg.WriteTimeout, Observe: cfg.Health.ObserveWrite},
		Corrupt: rep, Migrate: cfg.Migrate, Logger: cfg.Logger, Quota: cfg.IntakeQuota,
	})
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	p := &Pipeline{
		cfg:      cfg,
		js:       js,
		log:      cfg.Logger,
		st:       st,
		metrics:  cfg.Metrics,
		tracer:   tracing.New(cfg.TracerProvider),
		tokens:   seqid.New(),
		clock:    newClock(cfg.Heartbeat),
		memo:     newDecisionMemo(cfg.NoDefer || cfg.noMemo),
		advances: newAdvanceMemo(cfg.NoDefer || cfg.noMemo),

		constitution: rules.VersionOf(cfg.Rules),
		corrupt:      rep,
		rate:         newLimiter(cfg.IntakeRate, cfg.Now),
		calls:        status.NewCalls(),
	}
	// Agent calls become spans under their phase's, and carry its
	// traceparent to the workers.
	cfg.Executors.SetTracer(p.tracer)
	p.env = &phases.Env{
		Locks:          st.Locks,
		Budgets:        budgets{t: st.Budgets, cps: st.Checkpoints},
		Waves:          st.Budgets,
		Resolver:       st.Resolver(),
		Artifacts:      st.Artifacts,
		Executors:      cfg.Executors,
		Rules:          cfg.Rules,
		Facts:          st.Facts(),
		Logger:         cfg.Logger,
		Metrics:        cfg.Metrics,
		MaxIntakeBytes: cfg.MaxIntakeBytes,
		Now:            cfg.Now,
		RetryDelay:     cfg.RetryDelay,
		LockWait:       cfg.LockWait,
		BudgetWarning:  max(cfg.BudgetWarning, 0),
		ChildWait:      cfg.ChildBudget == ChildBudgetWait,

		InlineArtifactBytes: cfg.InlineArtifactBytes,
	}
	p.grants = artifactsvc.NewGrants(0, cfg.Now)
	p.env.Grants = p.grants
	if st.Compositions != nil {
		p.env.Steps = stepNames{st: st}
	}
	// The admin validates a replay's corrected capsule as RECEPTION does.
	p.admin = admin.New(st, admin.Config{Now: cfg.Now, Metrics: cfg.Metrics, Env: p.env, Ended: p.traceEnd, PhasePaused: p.pauses.set})
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

// Rules is the constitution this pipeline enforces (defaults applied).
func (p *Pipeline) Rules() rules.Config { return p.cfg.Rules }

// Checkpoints gives read access to the checkpoint store.
func (p *Pipeline) Checkpoints() *store.Checkpoints { return p.st.Checkpoints }

// Store is the JetStream store the pipeline works on.
func (p *Pipeline) Store() *store.Store { return p.st }

// Calls are the agent calls this pipeline runs, as their streams show them
// so far: sagad's admin service and console read them.
func (p *Pipeline) Calls() *status.Calls { return p.calls }

// Admin carries out operator actions on this pipeline's store, counted in
// its metrics (sagad's admin service serves it).
func (p *Pipeline) Admin() *admin.Admin { return p.admin }

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
	p.stopping = workCtx.Done()
	rc := runner.Config{Workers: p.cfg.Workers, Logger: p.log, Metrics: p.metrics, RetryDelay: p.cfg.RetryDelay, BusyDelay: p.cfg.RetryDelay, Progress: p.cfg.Health.Settled}
	// Served before any call is made: a worker fetches while its call runs.
	svc, err := artifactsvc.Start(p.js.Conn(), p.grants, p.st.Artifacts, artifactsvc.Config{Logger: p.log})
	if err != nil {
		cancel()
		return fmt.Errorf("pipeline: %w", err)
	}
	p.artifacts = svc
	// RECEPTION's lock availability is answered from a watch of the locks
	// bucket when the lock is free (locks.Manager.Mirror); without it,
	// every check reads.
	if err := p.st.Locks.Mirror(workCtx); err != nil {
		p.log.Warn("lock availability is read for every capsule", "error", err)
	}
	if !p.cfg.NoPauseView {
		p.watchPauses(workCtx)
	}
	p.clock.start()
	stopAll := func() {
		cancel()
		for _, r := range p.running {
			r.Stop()
		}
		p.running = nil
		p.clock.stop()
		_ = svc.Stop()
	}
	for ph := capsule.Phase(0); ph < capsule.NumPhases; ph++ {
		r, err := runner.Start(ctx, workCtx, p.js, store.PhaseStream(ph), store.ConsumerName(ph), rc, func(ctx context.Context, msg jetstream.Msg) runner.Delivery {
			return p.handle(ctx, ph, msg)
		})
		if err != nil {
			stopAll()
			return fmt.Errorf("pipeline: start %s: %w", ph, err)
		}
		p.running = append(p.running, r)
	}
	ingest := maintenance.NewCompletions(p.st, p.admin, maintenance.CompletionsConfig{Logger: p.log, Now: p.cfg.Now})
	r, err := runner.Start(ctx, workCtx, p.js, store.CompletionsStream, store.CompletionsConsumer, rc, ingest.Handle)
	if err != nil {
		stopAll()
		return fmt.Errorf("pipeline: start completions: %w", err)
	}
	p.running = append(p.running, r)
	p.sweeper = maintenance.NewSweeper(p.st, p.admin, maintenance.SweeperConfig{
		Logger: p.log, Now: p.cfg.Now, Interval: p.cfg.SweepInterval, ExternalTimeout: p.cfg.ExternalTimeout,
		DependencyTimeout: p.cfg.DependencyTimeout,
	})
	p.sweeper.Start(workCtx)
	// A released reservation or a changed wave lets waiting capsules on now.
	p.st.OnWaveChange(p.sweeper.Wake)
	if p.cfg.RescueAfter > 0 {
		p.rescuer = maintenance.NewRescuer(p.st, maintenance.RescuerConfig{
			Logger: p.log, Metrics: p.metrics, Now: p.cfg.Now, After: p.cfg.RescueAfter,
		})
		if err := p.rescuer.Start(workCtx); err != nil {
			p.sweeper.Stop()
			stopAll()
			return fmt.Errorf("pipeline: start the rescuer: %w", err)
		}
	}
	p.log.Info("pipeline started", "instance", p.cfg.InstanceID, "workers", p.cfg.Workers, "workspace", p.cfg.Workspace)
	return nil
}

// Stop stops fetching, lets in-flight phases finish (or hands their messages
// back when ctx expires first), and returns when no work is left.
func (p *Pipeline) Stop(ctx context.Context) {
	p.mu.Lock()
	running, cancel, sweeper, rescuer, artifacts := p.running, p.cancel, p.sweeper, p.rescuer, p.artifacts
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
			go func() { defer wg.Done(); r.Stop() }()
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
	// After the work: an attempt still running past the grace beats no
	// more (its context is cancelled anyway).
	p.clock.stop()
	sweeper.Stop()
	if rescuer != nil {
		rescuer.Stop()
	}
	if artifacts != nil {
		if err := artifacts.Stop(); err != nil {
			p.log.Warn("artifacts service stop", "error", err)
		}
	}
	p.log.Info("pipeline stopped", "instance", p.cfg.InstanceID)
}

// stopGrace is how long Stop still waits for work after its context ended.
const stopGrace = 5 * time.Second

// budgets charges capsules outside any wave in their checkpoint alone, and
// wave capsules through the budget bucket, where the wave's total lives. A
// parent capsule's caps bound its own spend plus its descendants' (its
// family record), and a child's spend is charged to its ancestors too.
type budgets struct {
	t   *budget.Tracker
	cps *store.Checkpoints
}

func (b budgets) Charge(ctx context.Context, capsuleID, waveID, chargeID string, caps capsule.Budget, used, u capsule.Usage) (budget.ChargeResult, error) {
	var res budget.ChargeResult
	if waveID == "" || u == (capsule.Usage{}) {
		// A call that consumed nothing cannot cross a cap: a wave another
		// capsule exhausted halts that capsule, not this one.
		total := used.Add(u)
		res = budget.ChargeResult{Capsule: total, Exceeded: budget.Check(total, caps)}
	} else {
		var err error
		if res, err = b.t.Charge(ctx, capsuleID, waveID, chargeID, caps, u); err != nil {
			return res, err
		}
	}
	return res, nil
}

// ChargeOwn implements phases.AncestorBudgets: a capsule that may
// delegate charges its own spend into its family record too, where its
// children's admission reads it.
func (b budgets) ChargeOwn(ctx context.Context, key, parent, chargeID string, caps capsule.Budget, u capsule.Usage) (budget.Family, error) {
	return b.t.ChargeOwn(ctx, key, parent, chargeID, caps, u)
}

// ReserveChild implements phases.AncestorBudgets: the child's caps are
// reserved at its parent and every ancestor above it.
func (b budgets) ReserveChild(ctx context.Context, parent, holder string, caps capsule.Budget) (budget.ChildAdmission, error) {
	return b.t.ReserveChild(ctx, parent, holder, caps)
}

// ChargeAncestors implements phases.AncestorBudgets: u, spent by child,
// goes to the family record of parent and of each ancestor above it, out
// of the reservation there of the ancestor's child the spender descends
// from, from the root down (budget.Tracker.ChargeAncestors says why); an
// ancestor whose own spend plus its descendants' crosses its caps makes
// the charging child halt, the nearest such ancestor naming the reason.
// With reservations that cannot happen while every capsule stays within
// its own caps; it still can when a call crosses its capsule's cap.
func (b budgets) ChargeAncestors(ctx context.Context, parent, child, chargeID string, u capsule.Usage) (string, error) {
	charged, err := b.t.ChargeAncestors(ctx, parent, child, chargeID, u)
	if err != nil {
		return "", err
	}
	for _, c := range charged {
		own := c.Family.Own
		if own == (capsule.Usage{}) {
			// A record an older sagad wrote has no own spend: the
			// checkpoint has it.
			if cp, _, err := b.cps.Get(ctx, c.Ancestor); err == nil {
				own = cp.State.BudgetUsed
			} else if !errors.Is(err, store.ErrNotFound) {
				return "", err
			}
		}
		switch budget.Check(own.Add(c.Family.Used), c.Family.Caps) {
		case capsule.BudgetTokens:
			return capsule.BudgetParentTokens, nil
		case capsule.BudgetDollars:
			return capsule.BudgetParentDollars, nil
		}
	}
	return "", nil
}
