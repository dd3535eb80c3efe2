package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/phases"
)

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
	c := new(capsule.Capsule)
	if err := json.Unmarshal(raw, c); err != nil {
		p.log.Error("undecodable capsule in phase stream dropped", "phase", ph.String(), "key", key, "error", err)
		return 0, nil
	}
	t := &txn{p: p, key: key}
	if err := t.load(ctx); err != nil {
		return p.cfg.RetryDelay, err
	}
	if !t.current(ph, cycle) {
		token := msg.Headers().Get(HeaderResumeToken)
		if !t.resumable(ph, cycle, token) {
			return p.reemitFor(ctx, t.cp, ph, cycle, raw)
		}
		// The resume that sent this message may not have flipped the
		// state yet (or died before it could): finish it here.
		if err := t.resume(ctx, ph, cycle, token); errors.Is(err, errStale) {
			return p.reemitFor(ctx, t.cp, ph, cycle, raw)
		} else if err != nil {
			return p.cfg.RetryDelay, err
		}
	}
	if md, err := msg.Metadata(); err == nil && md.NumDelivered > 1 {
		p.metrics.Redelivered(ph)
	}
	start := p.cfg.Now()
	var d phases.Decision
	if w, ok := p.deadlineWarning(t.snapshot(), c, start); ok {
		d = w
	} else {
		in := &phases.Input{
			Capsule:    c,
			Raw:        raw,
			Checkpoint: t.snapshot(),
			Claim:      func(ctx context.Context) error { return t.claim(ctx, cycle, c.Constraints.ResourceLocksRequired) },
			Progress: func() {
				_ = msg.InProgress()
				if err := t.renew(ctx, cycle); err != nil {
					p.log.Warn("renew execution claim", "key", key, "error", err)
				}
			},
		}
		if md, err := msg.Metadata(); err == nil {
			in.Entered = md.Timestamp
		}
		d = p.phases[ph].Run(ctx, p.env, in)
	}
	if d.Action == phases.Retry {
		return p.cfg.RetryDelay + d.Delay, d.Err
	}
	tr, ok, cp, err := t.commit(ctx, ph, cycle, d)
	if errors.Is(err, errStale) {
		// Someone else recorded this transition (or the capsule moved on):
		// their outcome stands, ours is dropped.
		return p.reemitFor(ctx, t.cp, ph, cycle, raw)
	}
	if err != nil {
		return p.cfg.RetryDelay, err
	}
	var trp *capsule.Transition
	if ok {
		trp = &tr
	}
	p.observe(cp, trp, d, p.cfg.Now().Sub(start))
	if err := p.effects(ctx, cp, trp, d.Findings, raw, c.Constraints.ResourceLocksRequired); err != nil {
		// The transition is recorded; redelivery re-emits its effects.
		return p.cfg.RetryDelay, err
	}
	return 0, nil
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

// txn holds the checkpoint one message works on and its KV revision. Claim,
// renew and commit are compare-and-sets; a heartbeat goroutine and the phase
// share it, hence the mutex.
type txn struct {
	p     *Pipeline
	key   string
	token string

	mu  sync.Mutex
	cp  *capsule.Checkpoint
	rev uint64
}

func (t *txn) load(ctx context.Context) error {
	cp, rev, err := t.p.checkpoints.Get(ctx, t.key)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.cp, t.rev = cp, rev
	t.mu.Unlock()
	return nil
}

// current reports whether the checkpoint waits for phase ph of cycle.
func (t *txn) current(ph capsule.Phase, cycle int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.cp.State
	return st.Status == capsule.InProgress && st.Phase == ph && st.Cycle == cycle
}

// snapshot returns a copy of the checkpoint for a phase to read.
func (t *txn) snapshot() *capsule.Checkpoint {
	t.mu.Lock()
	defer t.mu.Unlock()
	return cloneCheckpoint(t.cp)
}

// claim takes the execution claim of cycle for this delivery.
func (t *txn) claim(ctx context.Context, cycle int, lockPaths []string) error {
	if t.token == "" {
		t.token = t.p.cfg.InstanceID + "/" + nuid.Next()
	}
	for i := 0; i < maxConflicts; i++ {
		t.mu.Lock()
		cp := cloneCheckpoint(t.cp)
		rev := t.rev
		t.mu.Unlock()
		now := t.p.cfg.Now()
		if ex := cp.State.Execution; ex != nil && ex.Cycle == cycle && ex.Holder != t.token && now.Before(ex.ExpiresAt) {
			return fmt.Errorf("%w: %s until %s", phases.ErrClaimHeld, ex.Holder, ex.ExpiresAt.Format(time.RFC3339))
		}
		cp.State.Execution = &capsule.ExecutionClaim{Cycle: cycle, Holder: t.token, ExpiresAt: now.Add(t.p.cfg.ClaimLease)}
		cp.State.LocksHeld = append([]string{}, lockPaths...)
		n, err := t.p.checkpoints.Update(ctx, cp, rev)
		if errors.Is(err, errConflict) {
			if err := t.load(ctx); err != nil {
				return err
			}
			if !t.current(capsule.Execution, cycle) {
				return errStale
			}
			continue
		}
		if err != nil {
			return err
		}
		t.mu.Lock()
		t.cp, t.rev = cp, n
		t.mu.Unlock()
		return nil
	}
	return errConflict
}

// renew extends this delivery's execution claim, if it holds one.
func (t *txn) renew(ctx context.Context, cycle int) error {
	if t.token == "" {
		return nil
	}
	for i := 0; i < maxConflicts; i++ {
		t.mu.Lock()
		cp := cloneCheckpoint(t.cp)
		rev := t.rev
		t.mu.Unlock()
		if ex := cp.State.Execution; ex == nil || ex.Holder != t.token || ex.Cycle != cycle {
			return nil
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
		t.mu.Lock()
		t.cp, t.rev = cp, n
		t.mu.Unlock()
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
		cp := cloneCheckpoint(t.cp)
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
		t.mu.Lock()
		t.cp, t.rev = cp, n
		t.mu.Unlock()
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
func (t *txn) commit(ctx context.Context, ph capsule.Phase, cycle int, d phases.Decision) (capsule.Transition, bool, *capsule.Checkpoint, error) {
	for i := 0; i < maxConflicts; i++ {
		t.mu.Lock()
		cp := cloneCheckpoint(t.cp)
		rev := t.rev
		t.mu.Unlock()
		if ex := cp.State.Execution; ex != nil && ex.Cycle == cycle && t.token != "" && ex.Holder != t.token {
			// Our claim lapsed and another delivery took the cycle over.
			return capsule.Transition{}, false, nil, errStale
		}
		tr, ok := apply(cp, ph, cycle, d, t.p.cfg.Now().UTC())
		n, err := t.p.checkpoints.Update(ctx, cp, rev)
		if errors.Is(err, errConflict) {
			if err := t.load(ctx); err != nil {
				return tr, ok, nil, err
			}
			if !t.standsAt(ph, cycle) {
				return tr, ok, nil, errStale
			}
			continue
		}
		if err != nil {
			return tr, ok, nil, err
		}
		t.mu.Lock()
		t.cp, t.rev = cp, n
		t.mu.Unlock()
		return tr, ok, cp, nil
	}
	return capsule.Transition{}, false, nil, errConflict
}

// standsAt reports whether the capsule is still at (ph, cycle) and not
// finished: in progress, or paused there by an operator meanwhile.
func (t *txn) standsAt(ph capsule.Phase, cycle int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.cp.State
	return st.Phase == ph && st.Cycle == cycle &&
		(st.Status == capsule.InProgress || (st.Status == capsule.Paused && st.Pause != nil && st.Pause.Trigger == capsule.TriggerOperatorManual))
}

func cloneCheckpoint(cp *capsule.Checkpoint) *capsule.Checkpoint {
	b, err := json.Marshal(cp)
	if err != nil {
		panic(err)
	}
	out := new(capsule.Checkpoint)
	if err := json.Unmarshal(b, out); err != nil {
		panic(err)
	}
	return out
}

// reemitFor handles a message whose transition is already recorded: it
// re-emits that transition's effects (all de-duplicated) and acks.
func (p *Pipeline) reemitFor(ctx context.Context, cp *capsule.Checkpoint, ph capsule.Phase, cycle int, raw []byte) (time.Duration, error) {
	tr, ok := cp.Find(ph, cycle)
	if !ok {
		// Not recorded and not current: the capsule is paused or waiting
		// here (resume sends a new message), or this message is a stray.
		// The checkpoint is the truth; drop it.
		p.log.Debug("stale message dropped", "key", cp.Key, "phase", ph.String(), "cycle", cycle, "state", cp.State.Status)
		return 0, nil
	}
	var lockPaths []string
	var c capsule.Capsule
	if json.Unmarshal(raw, &c) == nil {
		lockPaths = c.Constraints.ResourceLocksRequired
	}
	if err := p.effects(ctx, cp, &tr, cp.State.Findings, raw, lockPaths); err != nil {
		return p.cfg.RetryDelay, err
	}
	return 0, nil
}

// effects publishes what a recorded change of cp means for the world: the
// events of transition tr (nil when the capsule parked without one), the
// next phase's message while the capsule is in progress, the outcome when it
// ended, its continuation while paused, and the release of its locks. Each
// publish carries a deterministic Nats-Msg-Id, so emitting twice is harmless.
func (p *Pipeline) effects(ctx context.Context, cp *capsule.Checkpoint, tr *capsule.Transition, findings []capsule.Finding, raw []byte, lockPaths []string) error {
	st := cp.State
	if tr != nil {
		for _, ev := range transitionEvents(cp, *tr, findings) {
			if err := p.publishEvent(ctx, ev); err != nil {
				return err
			}
		}
		if np, ncycle, ok := next(*tr); ok && st.Status == capsule.InProgress && st.Phase == np && st.Cycle == ncycle {
			if err := p.publishPhase(ctx, cp, raw, ""); err != nil {
				return err
			}
		}
		if state, ok := terminalState(*tr); ok {
			if err := p.publishOutcome(ctx, cp, *tr, state, raw); err != nil {
				return err
			}
		}
	}
	if (st.Status == capsule.Paused || st.Status == capsule.WaitingForOperator) && st.Pause != nil && st.Pause.ResumeToken == "" {
		if err := p.parked(ctx, cp); err != nil {
			return err
		}
	}
	release := st.Status.Terminal() || (tr != nil && tr.Phase == capsule.Execution) ||
		(tr == nil && st.Phase == capsule.Execution && st.Status == capsule.Paused && len(st.LocksHeld) == 0)
	if release {
		if err := p.locks.ReleaseAll(ctx, lockPaths, cp.Key); err != nil {
			return fmt.Errorf("release locks: %w", err)
		}
	}
	if st.Status.Terminal() {
		if err := p.continuations.Delete(ctx, cp.Key); err != nil {
			return err
		}
	}
	return nil
}

// publishPhase sends the capsule to its current phase. token marks a resume.
func (p *Pipeline) publishPhase(ctx context.Context, cp *capsule.Checkpoint, raw []byte, token string) error {
	ph, cycle := cp.State.Phase, cp.State.Cycle
	m := nats.NewMsg(PhaseSubject(ph))
	m.Data = raw
	setCapsuleHeaders(m, cp)
	m.Header.Set(HeaderPhase, strconv.Itoa(int(ph)))
	m.Header.Set(HeaderCycle, strconv.Itoa(cycle))
	id := fmt.Sprintf("%s.p%d.c%d", cp.Key, ph, cycle)
	if token != "" {
		m.Header.Set(HeaderResumeToken, token)
		id += "." + token
	}
	m.Header.Set(jetstream.MsgIDHeader, id)
	if _, err := p.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publish to %s: %w", ph, err)
	}
	return nil
}

func (p *Pipeline) publishOutcome(ctx context.Context, cp *capsule.Checkpoint, tr capsule.Transition, state capsule.State, raw []byte) error {
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
	if _, err := p.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publish outcome: %w", err)
	}
	return nil
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
	attrs := []any{
		"capsule_id", cp.CapsuleID, "key", cp.Key, "phase", tr.PhaseName, "cycle", tr.Cycle,
		"trace_id", cp.TraceID, "outcome", tr.Outcome, "duration", took,
	}
	if tr.Detail != "" {
		attrs = append(attrs, "halt_reason", tr.Detail)
	}
	p.log.Info("transition", attrs...)
}

func (p *Pipeline) publishEvent(ctx context.Context, ev capsule.Event) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	m := nats.NewMsg(EventSubject(ev.Key))
	m.Data = b
	m.Header.Set(jetstream.MsgIDHeader, ev.ID)
	m.Header.Set(HeaderTraceID, ev.TraceID)
	if _, err := p.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("publish event %s: %w", ev.ID, err)
	}
	return nil
}

func decodeCapsule(raw []byte) (*capsule.Capsule, error) {
	c := new(capsule.Capsule)
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, err
	}
	return c, nil
}
