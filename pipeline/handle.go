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
		return p.reemitFor(ctx, t.cp, ph, cycle, raw)
	}
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
	start := p.cfg.Now()
	d := p.phases[ph].Run(ctx, p.env, in)
	if d.Action == phases.Retry {
		return p.cfg.RetryDelay + d.Delay, d.Err
	}
	tr, cp, err := t.commit(ctx, ph, cycle, d)
	if errors.Is(err, errStale) {
		// Someone else recorded this transition (or the capsule moved on):
		// their outcome stands, ours is dropped.
		return p.reemitFor(ctx, t.cp, ph, cycle, raw)
	}
	if err != nil {
		return p.cfg.RetryDelay, err
	}
	p.logTransition(cp, tr, p.cfg.Now().Sub(start))
	if err := p.emit(ctx, cp, tr, d.Findings, raw, c.Constraints.ResourceLocksRequired); err != nil {
		// The transition is recorded; redelivery re-emits its effects.
		return p.cfg.RetryDelay, err
	}
	return 0, nil
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

// commit records decision d as the transition of (ph, cycle). If the
// checkpoint changed meanwhile but still waits for (ph, cycle), the decision
// is applied to the fresh checkpoint; otherwise errStale.
func (t *txn) commit(ctx context.Context, ph capsule.Phase, cycle int, d phases.Decision) (capsule.Transition, *capsule.Checkpoint, error) {
	for i := 0; i < maxConflicts; i++ {
		t.mu.Lock()
		cp := cloneCheckpoint(t.cp)
		rev := t.rev
		t.mu.Unlock()
		if ex := cp.State.Execution; ex != nil && ex.Cycle == cycle && t.token != "" && ex.Holder != t.token {
			// Our claim lapsed and another delivery took the cycle over.
			return capsule.Transition{}, nil, errStale
		}
		tr := apply(cp, ph, cycle, d, t.p.cfg.Now().UTC())
		n, err := t.p.checkpoints.Update(ctx, cp, rev)
		if errors.Is(err, errConflict) {
			if err := t.load(ctx); err != nil {
				return tr, nil, err
			}
			if !t.current(ph, cycle) {
				return tr, nil, errStale
			}
			continue
		}
		if err != nil {
			return tr, nil, err
		}
		t.mu.Lock()
		t.cp, t.rev = cp, n
		t.mu.Unlock()
		return tr, cp, nil
	}
	return capsule.Transition{}, nil, errConflict
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
		// Not recorded and not current: the capsule is paused, waiting, or
		// somewhere this message is not meant for. Drop the duplicate; the
		// checkpoint is the truth and resume re-publishes what is needed.
		p.log.Debug("stale message dropped", "key", cp.Key, "phase", ph.String(), "cycle", cycle, "state", cp.State.Status)
		return 0, nil
	}
	var lockPaths []string
	var c capsule.Capsule
	if json.Unmarshal(raw, &c) == nil {
		lockPaths = c.Constraints.ResourceLocksRequired
	}
	if err := p.emit(ctx, cp, tr, cp.State.Findings, raw, lockPaths); err != nil {
		return p.cfg.RetryDelay, err
	}
	return 0, nil
}

// emit publishes the effects of transition tr: its events, the next phase's
// message or the outcome, and the release of the capsule's locks. Each
// publish carries a deterministic Nats-Msg-Id, so emitting twice is harmless.
func (p *Pipeline) emit(ctx context.Context, cp *capsule.Checkpoint, tr capsule.Transition, findings []capsule.Finding, raw []byte, lockPaths []string) error {
	for _, ev := range transitionEvents(cp, tr, findings) {
		if err := p.publishEvent(ctx, ev); err != nil {
			return err
		}
	}
	if np, ncycle, ok := next(tr); ok {
		m := nats.NewMsg(PhaseSubject(np))
		m.Data = raw
		setCapsuleHeaders(m, cp)
		m.Header.Set(HeaderPhase, strconv.Itoa(int(np)))
		m.Header.Set(HeaderCycle, strconv.Itoa(ncycle))
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s.p%d.c%d", cp.Key, np, ncycle))
		if _, err := p.js.PublishMsg(ctx, m); err != nil {
			return fmt.Errorf("publish to %s: %w", np, err)
		}
	}
	if state, ok := terminalState(tr); ok {
		m := nats.NewMsg(OutcomeSubject(state))
		m.Data = raw
		setCapsuleHeaders(m, cp)
		m.Header.Set(HeaderState, string(state))
		m.Header.Set(HeaderPhase, strconv.Itoa(int(tr.Phase)))
		m.Header.Set(HeaderCycle, strconv.Itoa(tr.Cycle))
		if tr.Detail != "" {
			m.Header.Set(HeaderHaltReason, tr.Detail)
		}
		if len(cp.State.ArtifactRefs) > 0 {
			m.Header.Set(HeaderArtifacts, strings.Join(cp.State.ArtifactRefs, ","))
		}
		m.Header.Set(jetstream.MsgIDHeader, cp.Key+".outcome")
		if _, err := p.js.PublishMsg(ctx, m); err != nil {
			return fmt.Errorf("publish outcome: %w", err)
		}
	}
	if tr.Phase == capsule.Execution || tr.Outcome == capsule.OutcomeHalted || tr.Outcome == capsule.OutcomeCancelled {
		if err := p.locks.ReleaseAll(ctx, lockPaths, cp.Key); err != nil {
			return fmt.Errorf("release locks: %w", err)
		}
	}
	return nil
}

func setCapsuleHeaders(m *nats.Msg, cp *capsule.Checkpoint) {
	m.Header.Set(HeaderKey, cp.Key)
	if cp.CapsuleID != "" {
		m.Header.Set(HeaderCapsuleID, cp.CapsuleID)
	}
	m.Header.Set(HeaderTraceID, cp.TraceID)
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
