package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/phases"
)

// forgottenAfter is how many deliveries find no checkpoint before a phase
// message is taken for one of a forgotten capsule (see advance).
const forgottenAfter = 10

// maxConflicts bounds how often one message re-reads a checkpoint that keeps
// changing under it before it is handed back for redelivery.
const maxConflicts = 8

// handle runs phase ph for one message. It never returns an error: every
// outcome ends in an ack (transition recorded, or already recorded) or a nak
// with delay (try again later).
func (p *Pipeline) handle(ctx context.Context, ph capsule.Phase, msg jetstream.Msg) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.PhaseTimeout)
	defer cancel()
	var retry time.Duration
	var err error
	if ph == capsule.Reception {
		retry, err = p.receive(ctx, msg)
	} else {
		retry, err = p.advance(ctx, ph, msg)
	}
	if err != nil {
		p.log.Warn("phase will retry", "phase", ph.String(), "key", msg.Headers().Get(HeaderKey), "retry_in", retry, "error", err)
	}
	settle(msg, retry)
}

// advance runs phases 1–6.
func (p *Pipeline) advance(ctx context.Context, ph capsule.Phase, msg jetstream.Msg) (time.Duration, error) {
	key := msg.Headers().Get(HeaderKey)
	cycle, _ := strconv.Atoi(msg.Headers().Get(HeaderCycle))
	if key == "" {
		// Not ours: nothing to resume from, so drop it loudly instead of
		// redelivering it forever.
		p.log.Error("message without capsule key dropped", "phase", ph.String(), "subject", msg.Subject())
		return 0, nil
	}
	raw := msg.Data()
	c, err := p.cache.capsule(key, raw)
	if err != nil {
		p.log.Error("undecodable capsule in phase stream dropped", "phase", ph.String(), "key", key, "error", err)
		return 0, nil
	}
	// Phases start from this process's cached checkpoint when it has one: a
	// stale one loses its first compare-and-set (REVIEW's claim, before the
	// reviewer is called, or the commit), and the phase then runs again on
	// the checkpoint read from KV. EXECUTION reads it first: it takes locks
	// before its claim, and a capsule cancelled meanwhile must not get them.
	retry, err, stale := p.attempt(ctx, ph, msg, key, cycle, raw, c, ph != capsule.Execution)
	if stale {
		// The cached checkpoint was behind: decide again on the real one.
		retry, err, _ = p.attempt(ctx, ph, msg, key, cycle, raw, c, false)
	}
	if errors.Is(err, ErrNotFound) {
		// Every phase message follows the checkpoint that sent it, but a
		// read may be served by a replica that is behind: try again for a
		// while. Still none then means the capsule ended and was
		// forgotten (retention): a late copy has nothing left to do.
		if md, merr := msg.Metadata(); merr == nil && md.NumDelivered >= forgottenAfter {
			p.log.Warn("message for a capsule without a checkpoint dropped", "phase", ph.String(), "key", key, "deliveries", md.NumDelivered)
			return 0, nil
		}
	}
	return retry, err
}

// attempt runs phase ph once for the message. With useCache it may start
// from a stale checkpoint; it then reports stale instead of acting on it.
func (p *Pipeline) attempt(ctx context.Context, ph capsule.Phase, msg jetstream.Msg, key string, cycle int, raw []byte, c *capsule.Capsule, useCache bool) (time.Duration, error, bool) {
	t := &txn{p: p, key: key, token: p.cfg.InstanceID + "/" + nuid.Next()}
	cached := false
	if useCache {
		var err error
		if cached, err = t.loadCached(ctx); err != nil {
			return p.cfg.RetryDelay, err, false
		}
		t.fromCache = cached
		if cached && !t.current(ph, cycle) {
			return 0, nil, true
		}
	} else if err := t.load(ctx); err != nil {
		return p.cfg.RetryDelay, err, false
	}
	if !t.current(ph, cycle) {
		token := msg.Headers().Get(HeaderResumeToken)
		if !t.resumable(ph, cycle, token) {
			retry, err := p.reemitFor(ctx, t.cp, ph, cycle, raw, c.Constraints.ResourceLocksRequired)
			return retry, err, false
		}
		// The resume that sent this message may not have flipped the
		// state yet (or died before it could): finish it here.
		if err := t.resume(ctx, ph, cycle, token); errors.Is(err, errStale) {
			retry, err := p.reemitFor(ctx, t.cp, ph, cycle, raw, c.Constraints.ResourceLocksRequired)
			return retry, err, false
		} else if err != nil {
			return p.cfg.RetryDelay, err, false
		}
	}
	md, mdErr := msg.Metadata()
	if mdErr == nil && md.NumDelivered > 1 {
		p.metrics.Redelivered(ph)
	}
	// The heartbeat keeps the message and the claim alive for as long as
	// the phase runs and its result is recorded; losing the claim stops the run.
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	stopHeartbeat := p.heartbeat(runCtx, msg, t, cycle, stopRun)
	defer stopHeartbeat()
	start := p.cfg.Now()
	var d phases.Decision
	// The phase reads the checkpoint as it is: checkpoints are never changed
	// in place (every change is made on a clone), so no copy is needed.
	view := t.view()
	if w, ok := p.deadlineWarning(view, c, start); ok {
		d = w
	} else {
		in := &phases.Input{
			Capsule:    c,
			Raw:        raw,
			Checkpoint: view,
			Claim:      func(ctx context.Context) error { return t.claim(ctx, ph, cycle, c.Constraints.ResourceLocksRequired) },
			Revalidate: func(ctx context.Context) error {
				// A claim younger than half its lease cannot have lapsed.
				if !t.claimed.Load() || p.cfg.Now().Sub(t.claimedAt()) < p.cfg.ClaimLease/2 {
					return nil
				}
				return t.renew(ctx, cycle)
			},
		}
		if mdErr == nil {
			in.Entered = md.Timestamp
			in.Redelivered = md.NumDelivered > 1
		}
		d = p.phases[ph].Run(runCtx, p.env, in)
	}
	if t.cacheMiss.Load() {
		// The claim found the cached checkpoint stale before any agent
		// was called: decide again on the real one.
		return 0, nil, true
	}
	if d.Action == phases.Retry {
		return p.cfg.RetryDelay + d.Delay, d.Err, false
	}
	// Record what happened even if the phase's time ran out meanwhile (or
	// is about to: a fresh bound then, not a timer per message).
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) < recordTimeout || ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
		defer cancel()
	}
	// A successful claim proved the cached checkpoint current at that point.
	unverified := cached && !t.claimed.Load()
	tr, ok, cp, err := t.commit(ctx, ph, cycle, d, unverified)
	stopHeartbeat() // the claim ends with the transition
	if errors.Is(err, errStale) {
		if unverified {
			return 0, nil, true
		}
		// Someone else recorded this transition (or the capsule moved on):
		// their outcome stands, ours is dropped.
		retry, err := p.reemitFor(ctx, t.cp, ph, cycle, raw, c.Constraints.ResourceLocksRequired)
		return retry, err, false
	}
	if err != nil {
		return p.cfg.RetryDelay, err, false
	}
	var trp *capsule.Transition
	if ok {
		trp = &tr
	}
	p.observe(cp, trp, d, p.cfg.Now().Sub(start))
	if err := p.effects(ctx, cp, t.revision(), trp, raw, c.Constraints.ResourceLocksRequired); err != nil {
		// The transition is recorded; redelivery re-emits its effects.
		return p.cfg.RetryDelay, err, false
	}
	return 0, nil, false
}

// recordTimeout bounds recording a phase's result and emitting its effects.
const recordTimeout = 30 * time.Second

// heartbeat tells JetStream the message is in progress and renews this
// delivery's claim every Heartbeat until the returned stop is called. A lost
// claim calls lost. Most phases end long before the first beat, so it is a
// timer, not a goroutine per message.
func (p *Pipeline) heartbeat(ctx context.Context, msg jetstream.Msg, t *txn, cycle int, lost func()) (stop func()) {
	var (
		mu      sync.Mutex
		stopped bool
		beating sync.WaitGroup
		timer   *time.Timer
	)
	beat := func() {
		mu.Lock()
		if stopped || ctx.Err() != nil {
			mu.Unlock()
			return
		}
		beating.Add(1)
		mu.Unlock()
		defer beating.Done()
		_ = msg.InProgress()
		if err := t.renew(ctx, cycle); errors.Is(err, errClaimLost) {
			p.log.Warn("claim lost: stopping the phase", "key", t.key, "cycle", cycle)
			lost()
			return
		} else if err != nil {
			p.log.Warn("renew claim", "key", t.key, "error", err)
		}
		mu.Lock()
		if !stopped {
			timer.Reset(p.cfg.Heartbeat)
		}
		mu.Unlock()
	}
	mu.Lock()
	timer = time.AfterFunc(p.cfg.Heartbeat, beat)
	mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			stopped = true
			timer.Stop()
			mu.Unlock()
			beating.Wait() // a beat in flight may still write the claim
		})
	}
}

// deadlineWarning parks a capsule whose deadline (in force) is closer than
// the configured warning, once.
func (p *Pipeline) deadlineWarning(cp *capsule.Checkpoint, c *capsule.Capsule, now time.Time) (phases.Decision, bool) {
	if p.cfg.DeadlineWarning <= 0 || cp.State.HasWarned(capsule.TriggerDeadlineApproaching) {
		return phases.Decision{}, false
	}
	left := cp.State.DeadlineIn(c.Deadline).Sub(now)
	if left >= p.cfg.DeadlineWarning {
		return phases.Decision{}, false
	}
	return phases.ParkWith(capsule.TriggerDeadlineApproaching, fmt.Sprintf("%s left before the deadline", left.Round(time.Second))), true
}

// errStale: the checkpoint no longer waits for this (phase, cycle).
var errStale = errors.New("transition already recorded")

// errCacheStale: a claim found the cached checkpoint the phase started from
// out of date.
var errCacheStale = errors.New("cached checkpoint out of date")

// errClaimLost: this delivery's claim on the cycle is gone (the capsule was
// cancelled, or another delivery took the cycle over).
var errClaimLost = errors.New("claim on the cycle lost")

// txn holds the checkpoint one message works on and its KV revision. Claim,
// renew and commit are compare-and-sets; a heartbeat goroutine and the phase
// share it, hence the mutex.
type txn struct {
	p   *Pipeline
	key string
	// token names this delivery in claims; claimed says it holds one,
	// taken (or last renewed) at claimedNano.
	token       string
	claimed     atomic.Bool
	claimedNano atomic.Int64
	// fromCache says the run started from the process's cached checkpoint;
	// cacheMiss that its claim then found the cache stale.
	fromCache bool
	cacheMiss atomic.Bool

	mu  sync.Mutex
	cp  *capsule.Checkpoint
	rev uint64
}

// load reads the checkpoint from KV (decoding it only when the process's
// cached one is not that revision).
func (t *txn) load(ctx context.Context) error {
	cp, rev, err := t.p.checkpoints.get(ctx, t.key, t.p.cache)
	if err != nil {
		return err
	}
	t.set(cp, rev)
	return nil
}

// loadCached takes the checkpoint this process wrote last, if it has it.
func (t *txn) loadCached(ctx context.Context) (cached bool, err error) {
	if cp, rev, ok := t.p.cache.get(t.key); ok {
		t.mu.Lock()
		t.cp, t.rev = cp, rev
		t.mu.Unlock()
		return true, nil
	}
	return false, t.load(ctx)
}

// revision is the KV revision of the checkpoint last read or written.
func (t *txn) revision() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rev
}

// set records a checkpoint and revision just read or written.
func (t *txn) set(cp *capsule.Checkpoint, rev uint64) {
	t.mu.Lock()
	t.cp, t.rev = cp, rev
	t.mu.Unlock()
	t.p.cache.put(cp, rev)
}

// current reports whether the checkpoint waits for phase ph of cycle.
func (t *txn) current(ph capsule.Phase, cycle int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.cp.State
	return st.Status == capsule.InProgress && st.Phase == ph && st.Cycle == cycle
}

// view returns the checkpoint for a phase to read. It is shared: read only.
func (t *txn) view() *capsule.Checkpoint {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cp
}

// claim takes the claim on (ph, cycle) for this delivery: the phase is about
// to call an agent, which must not happen twice for one cycle.
func (t *txn) claim(ctx context.Context, ph capsule.Phase, cycle int, lockPaths []string) error {
	for i := 0; i < maxConflicts; i++ {
		t.mu.Lock()
		cp := t.cp.Clone()
		rev := t.rev
		t.mu.Unlock()
		now := t.p.cfg.Now()
		if ex := cp.State.Execution; ex != nil && ex.Cycle == cycle && ex.Holder != t.token && now.Before(ex.ExpiresAt) {
			return fmt.Errorf("%w: %s until %s", phases.ErrClaimHeld, ex.Holder, ex.ExpiresAt.Format(time.RFC3339))
		}
		cp.State.Execution = &capsule.ExecutionClaim{Cycle: cycle, Holder: t.token, ExpiresAt: now.Add(t.p.cfg.ClaimLease)}
		if ph == capsule.Execution {
			cp.State.LocksHeld = append([]string{}, lockPaths...)
		}
		n, err := t.p.checkpoints.Update(ctx, cp, rev)
		if errors.Is(err, errConflict) {
			if t.fromCache {
				// What the phase decided so far came from a stale
				// checkpoint: it must run again on the real one.
				t.cacheMiss.Store(true)
				return errCacheStale
			}
			if err := t.load(ctx); err != nil {
				return err
			}
			if !t.current(ph, cycle) {
				return errStale
			}
			continue
		}
		if err != nil {
			return err
		}
		t.set(cp, n)
		t.claimedNano.Store(t.p.cfg.Now().UnixNano())
		t.claimed.Store(true)
		return nil
	}
	return errConflict
}

func (t *txn) claimedAt() time.Time { return time.Unix(0, t.claimedNano.Load()) }

// renew extends this delivery's execution claim, if it holds one.
func (t *txn) renew(ctx context.Context, cycle int) error {
	if !t.claimed.Load() {
		return nil
	}
	for i := 0; i < maxConflicts; i++ {
		t.mu.Lock()
		cp := t.cp.Clone()
		rev := t.rev
		t.mu.Unlock()
		if ex := cp.State.Execution; ex == nil || ex.Holder != t.token || ex.Cycle != cycle {
			// Cancelled, or taken over after our lease lapsed: stop working.
			return errClaimLost
		}
		cp.State.Execution.ExpiresAt = t.p.cfg.Now().Add(t.p.cfg.ClaimLease)
		n, err := t.p.checkpoints.Update(ctx, cp, rev)
		if errors.Is(err, errConflict) {
			if err := t.load(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		t.set(cp, n)
		t.claimedNano.Store(t.p.cfg.Now().UnixNano())
		return nil
	}
	return errConflict
}

// resumable reports whether a message carrying token may resume the capsule
// paused (or waiting) at (ph, cycle).
func (t *txn) resumable(ph capsule.Phase, cycle int, token string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.cp.State
	return token != "" && (st.Status == capsule.Paused || st.Status == capsule.WaitingForOperator) &&
		st.Phase == ph && st.Cycle == cycle && st.Pause != nil && st.Pause.ResumeToken == token
}

// resume takes the capsule back to in_progress for the resume with token.
func (t *txn) resume(ctx context.Context, ph capsule.Phase, cycle int, token string) error {
	for i := 0; i < maxConflicts; i++ {
		t.mu.Lock()
		cp := t.cp.Clone()
		rev := t.rev
		t.mu.Unlock()
		resumeState(cp, t.p.cfg.Now().UTC())
		n, err := t.p.checkpoints.Update(ctx, cp, rev)
		if errors.Is(err, errConflict) {
			if err := t.load(ctx); err != nil {
				return err
			}
			if t.current(ph, cycle) {
				return nil
			}
			if !t.resumable(ph, cycle, token) {
				return errStale
			}
			continue
		}
		if err != nil {
			return err
		}
		t.set(cp, n)
		return nil
	}
	return errConflict
}

// resumeState is the checkpoint change of a resume.
func resumeState(cp *capsule.Checkpoint, now time.Time) {
	cp.State.Status = capsule.InProgress
	cp.State.Pause = nil
	cp.UpdatedAt = now
}

// commit records decision d as the transition of (ph, cycle). If the
// checkpoint changed meanwhile but still stands at (ph, cycle) — in progress,
// or paused by an operator while the phase ran — the decision is applied to
// the fresh checkpoint; otherwise errStale.
//
// fromCache says the phase started from a cached checkpoint, not known to be
// current: then any conflict is stale, since a pause may predate the run.
func (t *txn) commit(ctx context.Context, ph capsule.Phase, cycle int, d phases.Decision, fromCache bool) (capsule.Transition, bool, *capsule.Checkpoint, error) {
	for i := 0; i < maxConflicts; i++ {
		t.mu.Lock()
		cp := t.cp.Clone()
		rev := t.rev
		t.mu.Unlock()
		if !standsAt(cp, ph, cycle) {
			// Moved on or ended (a heartbeat may have read it meanwhile).
			return capsule.Transition{}, false, nil, errStale
		}
		ex := cp.State.Execution
		if t.claimed.Load() {
			if ex == nil || ex.Holder != t.token || ex.Cycle != cycle {
				// Our claim was cleared (cancel) or taken over: our result
				// does not count.
				return capsule.Transition{}, false, nil, errStale
			}
		} else if ex != nil && ex.Cycle == cycle && ex.Holder != t.token && t.p.cfg.Now().Before(ex.ExpiresAt) {
			// Another delivery holds the claim on this cycle: its result
			// is the one that counts.
			return capsule.Transition{}, false, nil, errStale
		}
		tr, ok := apply(cp, ph, cycle, d, t.p.cfg.Now().UTC())
		n, err := t.p.checkpoints.Update(ctx, cp, rev)
		if errors.Is(err, errConflict) {
			if err := t.load(ctx); err != nil {
				return tr, ok, nil, err
			}
			if fromCache || !t.standsAt(ph, cycle) {
				return tr, ok, nil, errStale
			}
			continue
		}
		if err != nil {
			return tr, ok, nil, err
		}
		t.set(cp, n)
		return tr, ok, cp, nil
	}
	return capsule.Transition{}, false, nil, errConflict
}

// standsAt reports whether the capsule is still at (ph, cycle) and not
// finished: in progress, or paused there by an operator meanwhile.
func (t *txn) standsAt(ph capsule.Phase, cycle int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return standsAt(t.cp, ph, cycle)
}

func standsAt(cp *capsule.Checkpoint, ph capsule.Phase, cycle int) bool {
	st := cp.State
	return st.Phase == ph && st.Cycle == cycle &&
		(st.Status == capsule.InProgress || (st.Status == capsule.Paused && st.Pause != nil && st.Pause.Trigger == capsule.TriggerOperatorManual))
}

// reemitFor handles a message whose transition is already recorded: it
// re-emits that transition's effects (harmless when repeated) and acks.
func (p *Pipeline) reemitFor(ctx context.Context, cp *capsule.Checkpoint, ph capsule.Phase, cycle int, raw []byte, lockPaths []string) (time.Duration, error) {
	tr, ok := cp.Find(ph, cycle)
	if !ok {
		st := cp.State
		if st.Phase == ph && st.Cycle == cycle && st.Pause != nil && st.Pause.ResumeToken == "" &&
			(st.Status == capsule.Paused || st.Status == capsule.WaitingForOperator) {
			// Parked here, maybe by a delivery that died before writing the
			// continuation: write it (again) before dropping the message.
			if err := p.effects(ctx, cp, 0, nil, raw, lockPaths); err != nil {
				return p.cfg.RetryDelay, err
			}
		}
		// Not recorded and not current: the capsule is paused or waiting
		// here (resume sends a new message), or this message is a stray.
		// The checkpoint is the truth; drop it.
		p.log.Debug("stale message dropped", "key", cp.Key, "phase", ph.String(), "cycle", cycle, "state", cp.State.Status)
		return 0, nil
	}
	if err := p.effects(ctx, cp, 0, &tr, raw, lockPaths); err != nil {
		return p.cfg.RetryDelay, err
	}
	return 0, nil
}

// effects publishes what a recorded change of cp means for the world: the
// events of transition tr (nil when the capsule parked without one), the
// next phase's message while the capsule is in progress, the outcome when it
// ended, its continuation while paused, and the release of its locks.
// Emitting twice is harmless (see the package doc). rev is cp's KV revision
// when the caller just wrote it, 0 when unknown.
func (p *Pipeline) effects(ctx context.Context, cp *capsule.Checkpoint, rev uint64, tr *capsule.Transition, raw []byte, lockPaths []string) error {
	st := cp.State
	if tr != nil {
		// The transition's events are in the checkpoint (CheckpointEvents).
		if np, ncycle, ok := next(*tr); ok && st.Status == capsule.InProgress && st.Phase == np && st.Cycle == ncycle {
			if err := p.publish(ctx, phaseMsg(cp, raw, "")); err != nil {
				return err
			}
		}
		// The outcome goes out until its acknowledgement is recorded on the
		// capsule's bytes; a repeat within the de-duplication window is
		// dropped by its Nats-Msg-Id.
		if state, ok := terminalState(*tr); ok {
			// rev != 0: the caller just recorded the end, so no one has
			// sent its outcome yet.
			send := rev != 0
			if !send {
				sent, err := p.outcomeSent(ctx, cp)
				if err != nil {
					return err
				}
				send = !sent
			}
			if send {
				if err := p.publish(ctx, outcomeMsg(cp, *tr, state, raw)); err != nil {
					return err
				}
				if err := p.markOutcomeSent(ctx, cp.Key, raw); err != nil {
					return err
				}
			}
		}
	}
	if (st.Status == capsule.Paused || st.Status == capsule.WaitingForOperator) && st.Pause != nil && st.Pause.ResumeToken == "" {
		if err := p.parked(ctx, cp); err != nil {
			return err
		}
	}
	// A stale EXECUTION message of an earlier cycle must not release the
	// locks the current cycle holds.
	release := (tr != nil && tr.Phase == capsule.Execution && (st.Phase != capsule.Execution || st.Status.Terminal())) ||
		(tr == nil && st.Phase == capsule.Execution && st.Status == capsule.Paused && len(st.LocksHeld) == 0)
	if release && len(lockPaths) > 0 {
		if err := p.locks.ReleaseAll(ctx, lockPaths, cp.Key); err != nil {
			return fmt.Errorf("release locks: %w", err)
		}
	}
	// A continuation left behind by a capsule that ended while paused is
	// removed by the sweeper, which keeps this hot path free of KV calls.
	return nil
}

// outcomeSent reports whether the outcome of the ended capsule cp was
// acknowledged: its bytes in SAGA_CAPSULES carry the mark markOutcomeSent
// wrote (checkpoints of earlier versions recorded it themselves).
func (p *Pipeline) outcomeSent(ctx context.Context, cp *capsule.Checkpoint) (bool, error) {
	if cp.OutcomeEmitted {
		return true, nil
	}
	m, err := p.stores.capsulesStream.GetLastMsgForSubject(ctx, capsuleSubject(cp.Key))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("outcome of %s: %w", cp.Key, err)
	}
	return m.Header.Get(HeaderOutcomeSent) != "", nil
}

// markOutcomeSent rewrites an ended capsule's bytes in SAGA_CAPSULES, after
// its outcome was acknowledged, marked so (outcomeSent) and with the
// retention as their time to live. It is the last write of the capsule's
// saga; the checkpoint got the same time to live when it recorded the end.
func (p *Pipeline) markOutcomeSent(ctx context.Context, key string, raw []byte) error {
	m := nats.NewMsg(capsuleSubject(key))
	m.Data = raw
	m.Header.Set(HeaderOutcomeSent, "true")
	if p.cfg.Retention > 0 {
		m.Header.Set(jetstream.MsgTTLHeader, p.cfg.Retention.String())
	}
	if err := p.publish(ctx, m); err != nil {
		return fmt.Errorf("record the outcome of %s: %w", key, err)
	}
	return nil
}

// publish publishes m and waits for its acknowledgement.
func (p *Pipeline) publish(ctx context.Context, m *nats.Msg) error {
	_, err := jspub.Publish(ctx, p.js.Conn(), m)
	return err
}

// publishPhase sends the capsule to its current phase. token marks a resume.
func (p *Pipeline) publishPhase(ctx context.Context, cp *capsule.Checkpoint, raw []byte, token string) error {
	m := phaseMsg(cp, raw, token)
	if _, err := p.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publish to %s: %w", m.Subject, err)
	}
	return nil
}

// phaseMsg is the message that sends the capsule to its current phase.
func phaseMsg(cp *capsule.Checkpoint, raw []byte, token string) *nats.Msg {
	ph, cycle := cp.State.Phase, cp.State.Cycle
	m := nats.NewMsg(PhaseSubject(ph))
	m.Data = raw
	setCapsuleHeaders(m, cp)
	m.Header.Set(HeaderPhase, strconv.Itoa(int(ph)))
	m.Header.Set(HeaderCycle, strconv.Itoa(cycle))
	// No de-duplication id: a second copy of a phase message is harmless
	// (it finds its transition recorded, or loses the compare-and-set), and
	// JetStream keeps every id of the window in memory.
	if token != "" {
		m.Header.Set(HeaderResumeToken, token)
	}
	return m
}

// outcomeMsg is the message that emits an ended capsule with its original bytes.
func outcomeMsg(cp *capsule.Checkpoint, tr capsule.Transition, state capsule.State, raw []byte) *nats.Msg {
	m := nats.NewMsg(OutcomeSubject(state))
	m.Data = raw
	setCapsuleHeaders(m, cp)
	m.Header.Set(HeaderState, string(state))
	m.Header.Set(HeaderPhase, strconv.Itoa(int(tr.Phase)))
	m.Header.Set(HeaderCycle, strconv.Itoa(tr.Cycle))
	if tr.Detail != "" && state == capsule.Halted {
		m.Header.Set(HeaderHaltReason, tr.Detail)
	}
	if len(cp.State.ArtifactRefs) > 0 {
		m.Header.Set(HeaderArtifacts, strings.Join(cp.State.ArtifactRefs, ","))
	}
	m.Header.Set(jetstream.MsgIDHeader, cp.Key+".outcome")
	return m
}

// parked records a pause: the continuation (for the five triggers) and the
// paused or waiting event.
func (p *Pipeline) parked(ctx context.Context, cp *capsule.Checkpoint) error {
	st := cp.State
	kind := capsule.EventPaused
	if st.Status == capsule.WaitingForOperator {
		kind = capsule.EventWaiting
	} else if err := p.continuations.Put(ctx, cp); err != nil {
		return err
	}
	return p.publishEvent(ctx, capsule.Event{
		ID:   fmt.Sprintf("%s.%d.%d.%s.%d", cp.Key, st.Phase, st.Cycle, kind, st.Pause.At.UnixNano()),
		Kind: kind, CapsuleID: cp.CapsuleID, Key: cp.Key, Phase: st.Phase, PhaseName: st.Phase.String(),
		Cycle: st.Cycle, TraceID: cp.TraceID, Detail: string(st.Pause.Trigger) + ": " + st.Pause.Reason,
		By: st.Pause.By, At: st.Pause.At,
	})
}

func setCapsuleHeaders(m *nats.Msg, cp *capsule.Checkpoint) {
	m.Header.Set(HeaderKey, cp.Key)
	if cp.CapsuleID != "" {
		m.Header.Set(HeaderCapsuleID, cp.CapsuleID)
	}
	m.Header.Set(HeaderTraceID, cp.TraceID)
}

// observe logs and counts one recorded change.
func (p *Pipeline) observe(cp *capsule.Checkpoint, tr *capsule.Transition, d phases.Decision, took time.Duration) {
	if tr == nil {
		p.log.Info("parked", "capsule_id", cp.CapsuleID, "key", cp.Key, "phase", cp.State.PhaseName, "cycle", cp.State.Cycle,
			"trace_id", cp.TraceID, "trigger", d.Trigger, "reason", d.Reason)
		p.metrics.Paused(d.Trigger)
		return
	}
	p.logTransition(cp, *tr, took)
	p.metrics.Transition(tr.Phase, tr.Outcome, took)
	if cp.State.Status.Terminal() {
		p.metrics.Ended(cp.State.Status, capsule.ParseHaltReason(cp.State.HaltReason))
	}
	if d.Halt.Code == capsule.CodeAbsoluteRulesViolated {
		var rules []int
		for _, f := range d.Findings {
			if f.Rule != 0 {
				rules = append(rules, f.Rule)
			}
		}
		p.metrics.RuleViolations(rules)
	}
	if cp.State.Status == capsule.Paused && cp.State.Pause != nil {
		p.metrics.Paused(cp.State.Pause.Trigger)
	}
}

func (p *Pipeline) logTransition(cp *capsule.Checkpoint, tr capsule.Transition, took time.Duration) {
	if !p.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	// Typed attributes: one line per transition is on the hot path.
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs,
		slog.String("capsule_id", cp.CapsuleID), slog.String("key", cp.Key), slog.String("phase", tr.PhaseName),
		slog.Int("cycle", tr.Cycle), slog.String("trace_id", cp.TraceID), slog.String("outcome", tr.Outcome),
		slog.Duration("duration", took))
	if tr.Detail != "" {
		attrs = append(attrs, slog.String("halt_reason", tr.Detail))
	}
	p.log.LogAttrs(context.Background(), slog.LevelInfo, "transition", attrs...)
}

func (p *Pipeline) publishEvent(ctx context.Context, ev capsule.Event) error {
	m, err := eventMsg(ev)
	if err != nil {
		return err
	}
	if _, err := p.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publish event %s: %w", ev.ID, err)
	}
	return nil
}

// eventMsg is one message holding the events of one transition (a JSON
// array, see capsule.DecodeEvents). A re-emitted message is stored again;
// readers drop repeated events by their deterministic id, which costs less
// than JetStream remembering every id of its de-duplication window.
func eventMsg(evs ...capsule.Event) (*nats.Msg, error) {
	b, err := json.Marshal(evs)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(EventSubject(evs[0].Key))
	m.Data = b
	m.Header.Set(HeaderEventID, evs[len(evs)-1].ID)
	m.Header.Set(HeaderTraceID, evs[0].TraceID)
	return m, nil
}

func decodeCapsule(raw []byte) (*capsule.Capsule, error) {
	c := new(capsule.Capsule)
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, err
	}
	c.Canonicalize() // as RECEPTION did: ids compare in one form
	return c, nil
}
