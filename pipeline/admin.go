package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/locks"
)

// StateError refuses an admin action the capsule's state does not allow.
// Nothing was changed.
type StateError struct {
	Action string
	Key    string
	State  capsule.State
	Hint   string
}

func (e *StateError) Error() string {
	msg := fmt.Sprintf("cannot %s %s: it is %s", e.Action, e.Key, e.State)
	if e.Hint != "" {
		msg += " (" + e.Hint + ")"
	}
	return msg
}

// ErrRefused matches every [*StateError].
var ErrRefused = errors.New("refused by the capsule's state")

// Is makes errors.Is(err, ErrRefused) true.
func (e *StateError) Is(target error) bool { return target == ErrRefused }

// Admin carries out operator actions: pause, resume, cancel, decide, phase
// pause. Each is a compare-and-set on the checkpoint followed by idempotent
// effects (events, messages, outcome, lock release), so running an action
// again after an error finishes it, and racing actions resolve to one.
type Admin struct {
	p   *Pipeline
	now func() time.Time
}

// NewAdmin binds to an existing sagad topology.
func NewAdmin(ctx context.Context, js jetstream.JetStream) (*Admin, error) {
	p, err := bind(ctx, js)
	if err != nil {
		return nil, err
	}
	return &Admin{p: p, now: time.Now}, nil
}

// Admin returns an Admin sharing this pipeline's stores (sagad's own sweeper
// and completion handling use it).
func (p *Pipeline) Admin() *Admin { return &Admin{p: p, now: p.cfg.Now} }

// bind returns a pipeline bound to existing stores, for admin actions only.
func bind(ctx context.Context, js jetstream.JetStream) (*Pipeline, error) {
	kv := func(name string) (jetstream.KeyValue, error) {
		b, err := js.KeyValue(ctx, name)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, ErrNoTopology
		}
		return b, err
	}
	st := &stores{}
	var err error
	if st.checkpoints, err = kv(CheckpointsBucket); err != nil {
		return nil, err
	}
	if st.capsules, err = kv(CapsulesBucket); err != nil {
		return nil, err
	}
	if st.capsulesStream, err = js.Stream(ctx, "KV_"+CapsulesBucket); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", CapsulesBucket, err)
	}
	if st.continuations, err = kv(ContinuationsBucket); err != nil {
		return nil, err
	}
	lm, err := locks.New(ctx, js, locks.Config{})
	if err != nil {
		return nil, err
	}
	cfg := Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}.withDefaults()
	// A capsule this admin ends expires like one sagad ends.
	if status, err := st.checkpoints.Status(ctx); err == nil {
		if d, err := time.ParseDuration(status.Metadata()[RetentionMetadata]); err == nil && d > 0 {
			cfg.Retention = d
		}
	}
	return &Pipeline{
		cfg: cfg, js: js, log: cfg.Logger, stores: st,
		checkpoints:   &Checkpoints{kv: st.checkpoints, js: js, ttl: cfg.Retention},
		cache:         newCache(),
		continuations: &Continuations{kv: st.continuations},
		locks:         lm,
	}, nil
}

// update applies change to the checkpoint of id with compare-and-set retries.
// change returns whether it changed anything; an error refuses the action.
func (a *Admin) update(ctx context.Context, id string, change func(cp *capsule.Checkpoint) (bool, error)) (*capsule.Checkpoint, bool, error) {
	found, err := a.p.checkpoints.Find(ctx, id)
	if err != nil {
		return nil, false, err
	}
	for i := 0; i < maxConflicts; i++ {
		cp, rev, err := a.p.checkpoints.Get(ctx, found.Key)
		if err != nil {
			return nil, false, err
		}
		changed, err := change(cp)
		if err != nil || !changed {
			return cp, false, err
		}
		cp.UpdatedAt = a.now().UTC()
		if _, err := a.p.checkpoints.Update(ctx, cp, rev); errors.Is(err, errConflict) {
			continue
		} else if err != nil {
			return nil, false, err
		}
		return cp, true, nil
	}
	return nil, false, fmt.Errorf("%s: checkpoint keeps changing, try again", id)
}

// raw returns the capsule's bytes as received.
func (a *Admin) raw(ctx context.Context, key string) ([]byte, *capsule.Capsule, error) {
	e, err := a.p.stores.capsules.Get(ctx, key)
	if err != nil {
		return nil, nil, fmt.Errorf("capsule bytes of %s: %w", key, err)
	}
	c, _ := decodeCapsule(e.Value())
	return e.Value(), c, nil
}

func (a *Admin) adminEvent(ctx context.Context, cp *capsule.Checkpoint, kind capsule.EventKind, id, detail, by string, findings []capsule.Finding) error {
	return a.p.publishEvent(ctx, capsule.Event{
		ID: cp.Key + ".admin." + id + "." + string(kind), Kind: kind, CapsuleID: cp.CapsuleID, Key: cp.Key,
		Phase: cp.State.Phase, PhaseName: cp.State.Phase.String(), Cycle: cp.State.Cycle, TraceID: cp.TraceID,
		Detail: detail, By: by, Findings: findings, At: a.now().UTC(),
	})
}

// Pause parks the capsule with operator_manual. A capsule inside a phase
// finishes that phase's step first and parks at the next one.
func (a *Admin) Pause(ctx context.Context, id, reason, by string) (Status, error) {
	cp, changed, err := a.update(ctx, id, func(cp *capsule.Checkpoint) (bool, error) {
		switch cp.State.Status {
		case capsule.InProgress:
			park(&cp.State, capsule.TriggerOperatorManual, reason, by, a.now().UTC())
			return true, nil
		case capsule.Paused:
			if cp.State.Pause != nil && cp.State.Pause.Trigger != capsule.TriggerOperatorManual && cp.State.Pause.ResumeToken == "" {
				// Parked by sagad (it would resume by itself): the operator's
				// pause takes over, so only an operator resumes it.
				park(&cp.State, capsule.TriggerOperatorManual, reason, by, a.now().UTC())
				return true, nil
			}
			return false, nil
		case capsule.WaitingForOperator:
			return false, &StateError{Action: "pause", Key: cp.Key, State: cp.State.Status, Hint: "it already waits for a decision: decide or cancel"}
		}
		return false, &StateError{Action: "pause", Key: cp.Key, State: cp.State.Status}
	})
	if err != nil {
		return Status{}, err
	}
	if cp.State.Pause != nil && cp.State.Pause.ResumeToken == "" {
		if err := a.p.parked(ctx, cp); err != nil {
			return StatusOf(cp), err
		}
	}
	if changed {
		a.p.metrics.Paused(capsule.TriggerOperatorManual)
	}
	a.p.metrics.AdminAction("pause")
	return StatusOf(cp), nil
}

// ResumeOptions lift the cause of a pause while resuming.
type ResumeOptions struct {
	By     string
	Reason string
	// Tokens and Dollars raise the capsule's caps (after a budget_warning).
	Tokens  int64
	Dollars float64
	// Deadline moves the capsule's deadline (after deadline_approaching).
	Deadline *time.Time
	// Force resumes a capsule waiting for accepted external work, which
	// runs its executor again for the cycle.
	Force bool
}

// Resume continues a paused capsule exactly where it stopped: it marks a
// resume token in the checkpoint, sends the capsule to its phase with that
// token, and flips it back to in_progress. If it dies half-way, the phase
// message (which only the token lets through) finishes the resume, and
// running Resume again re-sends the same token.
func (a *Admin) Resume(ctx context.Context, id string, opts ResumeOptions) (Status, error) {
	return a.resume(ctx, id, "resume", capsule.Paused, opts)
}

func (a *Admin) resume(ctx context.Context, id, action string, from capsule.State, opts ResumeOptions) (Status, error) {
	var token string
	var trigger capsule.Trigger
	cp, _, err := a.update(ctx, id, func(cp *capsule.Checkpoint) (bool, error) {
		st := &cp.State
		if st.Status != from || st.Pause == nil {
			hint := ""
			if st.Status == capsule.WaitingForOperator {
				hint = "it waits for an operator decision: sagactl decide ID accept|revise"
			}
			return false, &StateError{Action: action, Key: cp.Key, State: st.Status, Hint: hint}
		}
		if opts.Tokens < 0 || opts.Dollars < 0 {
			return false, errors.New("raised caps must be positive")
		}
		if st.AwaitingCycle > 0 && (st.Result == nil || st.Result.Cycle != st.AwaitingCycle) && !opts.Force {
			return false, &StateError{Action: action, Key: cp.Key, State: st.Status,
				Hint: "its executor accepted the work and its result has not arrived; --force runs the executor again"}
		}
		trigger = st.Pause.Trigger
		if st.Pause.ResumeToken != "" {
			token = st.Pause.ResumeToken // a resume in flight: finish that one
		} else {
			token = nuid.Next()
			st.Pause.ResumeToken = token
		}
		if opts.Tokens > 0 || opts.Dollars > 0 || opts.Deadline != nil {
			if st.Overrides == nil {
				st.Overrides = &capsule.Overrides{}
			}
			if opts.Tokens > 0 || opts.Dollars > 0 {
				st.Overrides.Tokens = max(opts.Tokens, st.Overrides.Tokens)
				st.Overrides.Dollars = max(opts.Dollars, st.Overrides.Dollars)
				st.Warned = without(st.Warned, capsule.TriggerBudgetWarning)
			}
			if opts.Deadline != nil {
				d := opts.Deadline.UTC()
				st.Overrides.Deadline = &d
				st.Warned = without(st.Warned, capsule.TriggerDeadlineApproaching)
			}
		}
		return true, nil
	})
	if err != nil {
		return Status{}, err
	}
	raw, _, err := a.raw(ctx, cp.Key)
	if err != nil {
		return StatusOf(cp), err
	}
	if err := a.p.publishPhase(ctx, cp, raw, token); err != nil {
		return StatusOf(cp), err
	}
	sentPhase, sentCycle := cp.State.Phase, cp.State.Cycle
	cp, flipped, err := a.update(ctx, cp.Key, func(cp *capsule.Checkpoint) (bool, error) {
		if cp.State.Pause == nil || cp.State.Pause.ResumeToken != token {
			return false, nil // the phase message finished the resume first
		}
		resumeState(cp, a.now().UTC())
		return true, nil
	})
	if err != nil {
		return Status{}, err
	}
	if flipped && (cp.State.Phase != sentPhase || cp.State.Cycle != sentCycle) {
		// A phase that was running when the capsule was paused finished
		// meanwhile and moved it on: the message sent above is stale.
		if err := a.p.publishPhase(ctx, cp, raw, ""); err != nil {
			return StatusOf(cp), err
		}
	}
	if err := a.p.continuations.DeleteIfStale(ctx, cp.Key, cp); err != nil {
		return StatusOf(cp), err
	}
	detail := string(trigger)
	if opts.Reason != "" {
		detail += ": " + opts.Reason
	}
	kind := capsule.EventResumed
	if action == "accept" {
		kind = capsule.EventOperatorAccepted
	}
	if err := a.adminEvent(ctx, cp, kind, token, detail, opts.By, nil); err != nil {
		return StatusOf(cp), err
	}
	a.p.metrics.Resumed(trigger)
	a.p.metrics.AdminAction(action)
	return StatusOf(cp), nil
}

func without(list []capsule.Trigger, t capsule.Trigger) []capsule.Trigger {
	out := list[:0:0]
	for _, x := range list {
		if x != t {
			out = append(out, x)
		}
	}
	return out
}

// Cancel ends the capsule in cancelled and releases its locks, from any
// non-terminal state. Cancelling a cancelled capsule re-emits its effects.
func (a *Admin) Cancel(ctx context.Context, id, reason, by string) (Status, error) {
	detail := "cancelled"
	if by != "" {
		detail += " by " + by
	}
	if reason != "" {
		detail += ": " + reason
	}
	return a.end(ctx, id, capsule.Cancelled, detail, by, nil)
}

// end ends a non-terminal capsule in state (cancelled, or halted with detail
// as the halt reason) where it stands, with its effects.
//
// expect, when set, must still hold of the checkpoint, or nothing is done
// (the caller decided on a state that has changed since).
func (a *Admin) end(ctx context.Context, id string, state capsule.State, detail, by string, expect func(*capsule.CheckpointState) bool) (Status, error) {
	outcome := capsule.OutcomeCancelled
	if state == capsule.Halted {
		outcome = capsule.OutcomeHalted
	}
	cp, _, err := a.update(ctx, id, func(cp *capsule.Checkpoint) (bool, error) {
		st := &cp.State
		if st.Status == state && state == capsule.Cancelled {
			return false, nil
		}
		if expect != nil && !expect(st) {
			return false, &StateError{Action: string(outcome), Key: cp.Key, State: st.Status, Hint: "it changed meanwhile"}
		}
		if st.Status.Terminal() {
			return false, &StateError{Action: string(outcome), Key: cp.Key, State: st.Status, Hint: "it has ended"}
		}
		st.Status = state
		if state == capsule.Halted {
			st.HaltReason = detail
		}
		st.Pause = nil
		st.Execution = nil
		st.LocksHeld = []string{}
		cp.History = append(cp.History, capsule.Transition{
			Phase: st.Phase, PhaseName: st.Phase.String(), Cycle: st.Cycle,
			Outcome: outcome, Detail: detail, At: a.now().UTC(),
		})
		return true, nil
	})
	if err != nil {
		return Status{}, err
	}
	if err := a.reemitEnd(ctx, cp); err != nil {
		return StatusOf(cp), err
	}
	if err := a.p.continuations.Delete(ctx, cp.Key); err != nil {
		return StatusOf(cp), err
	}
	a.p.metrics.Ended(state, capsule.ParseHaltReason(cp.State.HaltReason))
	if state == capsule.Cancelled {
		// The sweeper's halts come through here too: not operator actions.
		a.p.metrics.AdminAction("cancel")
	}
	return StatusOf(cp), nil
}

// reemitEnd emits the effects of an ended capsule's last transition again
// (events, outcome, lock release); all de-duplicated.
func (a *Admin) reemitEnd(ctx context.Context, cp *capsule.Checkpoint) error {
	if len(cp.History) == 0 || !cp.State.Status.Terminal() {
		return nil
	}
	tr := cp.History[len(cp.History)-1]
	raw, c, err := a.raw(ctx, cp.Key)
	if err != nil {
		return err
	}
	var paths []string
	if c != nil {
		paths = c.Constraints.ResourceLocksRequired
	}
	return a.p.effects(ctx, cp, 0, &tr, raw, paths)
}

func lastOutcome(cp *capsule.Checkpoint, outcome string) (capsule.Transition, bool) {
	for i := len(cp.History) - 1; i >= 0; i-- {
		if cp.History[i].Outcome == outcome {
			return cp.History[i], true
		}
	}
	return capsule.Transition{}, false
}

// Decisions an operator can take on a capsule waiting_for_operator.
const (
	DecisionAccept = "accept"
	DecisionRevise = "revise"
)

// Decide settles the operator gate: accept goes on to HANDOFF; revise sends
// the capsule back to EXECUTION as a new cycle with the rationale as the
// review's findings (Rule 12 still applies: past the last cycle it halts
// with max_cycles_exceeded). A capsule not waiting is refused, unchanged.
func (a *Admin) Decide(ctx context.Context, id, decision, rationale, by string) (Status, error) {
	switch decision {
	case DecisionAccept:
		return a.resume(ctx, id, "accept", capsule.WaitingForOperator, ResumeOptions{By: by, Reason: rationale})
	case DecisionRevise:
	default:
		return Status{}, fmt.Errorf("decision %q: want accept or revise", decision)
	}
	found, err := a.p.checkpoints.Find(ctx, id)
	if err != nil {
		return Status{}, err
	}
	raw, c, err := a.raw(ctx, found.Key)
	if err != nil {
		return Status{}, err
	}
	if c == nil {
		return Status{}, fmt.Errorf("capsule bytes of %s are unreadable", found.Key)
	}
	token := nuid.Next()
	var review []capsule.Finding
	cp, changed, err := a.update(ctx, found.Key, func(cp *capsule.Checkpoint) (bool, error) {
		st := &cp.State
		if st.Status != capsule.WaitingForOperator {
			if revisedBy(cp) != "" {
				return false, nil // this revision is recorded: finish its effects below
			}
			return false, &StateError{Action: "revise", Key: cp.Key, State: st.Status, Hint: "only a capsule waiting_for_operator can be decided"}
		}
		if st.Pause != nil && st.Pause.ResumeToken != "" {
			return false, &StateError{Action: "revise", Key: cp.Key, State: st.Status, Hint: "an accept is already under way"}
		}
		now := a.now().UTC()
		finding := capsule.Finding{Message: "operator revision: " + rationale}
		review = append(cp.LastReviewFindings(), finding)
		cycle := st.Cycle
		tr := capsule.Transition{Phase: st.Phase, PhaseName: st.Phase.String(), Cycle: cycle, At: now}
		st.Pause = nil
		st.Reviews = append(st.Reviews, capsule.ReviewEntry{
			Cycle: cycle, ReviewerID: "operator:" + by, Verdict: capsule.ChangesRequested, Findings: []capsule.Finding{finding}, At: now,
		})
		if cycle >= c.CycleLimit() {
			reason := capsule.MaxCyclesExceeded(c.CycleLimit()).String()
			tr.Outcome, tr.Detail = capsule.OutcomeHalted, reason
			st.Status, st.HaltReason = capsule.Halted, reason
		} else {
			tr.Outcome, tr.Detail = capsule.OutcomeLoopedBack, "operator revise: "+rationale
			st.Status = capsule.InProgress
			st.Phase, st.PhaseName, st.Cycle = capsule.Execution, capsule.Execution.String(), cycle+1
		}
		cp.History = append(cp.History, tr)
		return true, nil
	})
	if err != nil {
		return Status{}, err
	}
	if !changed && revisedBy(cp) == "" {
		return StatusOf(cp), nil
	}
	tr := cp.History[len(cp.History)-1]
	if !changed {
		review = cp.LastReviewFindings()
		rationale = strings.TrimPrefix(review[len(review)-1].Message, "operator revision: ")
		token = "rerun-" + strconv.Itoa(len(cp.History))
	}
	if err := a.adminEvent(ctx, cp, capsule.EventRevisionTriggered, token, rationale, by, review); err != nil {
		return StatusOf(cp), err
	}
	if err := a.p.effects(ctx, cp, 0, &tr, raw, c.Constraints.ResourceLocksRequired); err != nil {
		return StatusOf(cp), err
	}
	a.p.metrics.AdminAction("revise")
	return StatusOf(cp), nil
}

// revisedBy returns who revised the capsule if its last transition is an
// operator revision (a loop back, or the halt of Rule 12), else "".
func revisedBy(cp *capsule.Checkpoint) string {
	n, r := len(cp.History), len(cp.State.Reviews)
	if n == 0 || r == 0 {
		return ""
	}
	tr, rv := cp.History[n-1], cp.State.Reviews[r-1]
	if tr.Phase != capsule.Handoff || rv.Cycle != tr.Cycle || !strings.HasPrefix(rv.ReviewerID, "operator:") ||
		(tr.Outcome != capsule.OutcomeLoopedBack && tr.Outcome != capsule.OutcomeHalted) {
		return ""
	}
	return strings.TrimPrefix(rv.ReviewerID, "operator:")
}

// PendingItem is one capsule waiting for a human.
type PendingItem struct {
	CapsuleID string          `json:"capsule_id"`
	Key       string          `json:"key"`
	State     capsule.State   `json:"state"`
	Trigger   capsule.Trigger `json:"trigger"`
	Reason    string          `json:"reason"`
	By        string          `json:"by,omitempty"`
	Phase     int             `json:"phase"`
	PhaseName string          `json:"phase_name"`
	Cycle     int             `json:"cycle"`
	Since     time.Time       `json:"since"`
	AgeSecs   int64           `json:"age_seconds"`
}

// Pending lists what waits for a human, oldest first: capsules waiting for an
// operator decision, and paused ones only a person can resume (every trigger
// but lock_contention, which resumes by itself, and blocked_external on
// accepted work, which resumes when its result arrives).
func (a *Admin) Pending(ctx context.Context) ([]PendingItem, error) {
	all, err := a.p.checkpoints.List(ctx)
	if err != nil {
		return nil, err
	}
	now := a.now()
	var out []PendingItem
	for _, cp := range all {
		st := cp.State
		if st.Pause == nil || (st.Status != capsule.Paused && st.Status != capsule.WaitingForOperator) {
			continue
		}
		if st.Pause.Trigger == capsule.TriggerLockContention || (st.Pause.Trigger == capsule.TriggerBlockedExternal && st.AwaitingCycle > 0) {
			continue
		}
		out = append(out, PendingItem{
			CapsuleID: cp.CapsuleID, Key: cp.Key, State: st.Status, Trigger: st.Pause.Trigger, Reason: st.Pause.Reason,
			By: st.Pause.By, Phase: int(st.Phase), PhaseName: st.Phase.String(), Cycle: st.Cycle,
			Since: st.Pause.At, AgeSecs: int64(now.Sub(st.Pause.At).Seconds()),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Since.Before(out[j].Since) })
	return out, nil
}

// PhaseState is one phase consumer as `sagactl phase list` shows it.
type PhaseState struct {
	Phase      int    `json:"phase"`
	PhaseName  string `json:"phase_name"`
	Consumer   string `json:"consumer"`
	Paused     bool   `json:"paused"`
	Pending    uint64 `json:"pending"`
	AckPending int    `json:"ack_pending"`
}

// pauseForever is how far ahead a phase pause reaches: until resumed.
const pauseForever = 100 * 365 * 24 * time.Hour

// PausePhase stops every sagad from consuming phase ph; what is queued stays.
func (a *Admin) PausePhase(ctx context.Context, ph capsule.Phase) error {
	if _, err := a.p.js.PauseConsumer(ctx, PhaseStream(ph), ConsumerName(ph), a.now().Add(pauseForever)); err != nil {
		return fmt.Errorf("pause %s: %w", ph, err)
	}
	a.p.metrics.AdminAction("phase_pause")
	return nil
}

// ResumePhase lets every sagad consume phase ph again.
func (a *Admin) ResumePhase(ctx context.Context, ph capsule.Phase) error {
	// Clearing the pause outright does not wake pulls already waiting on
	// the server (nats-server 2.15), which would then idle until they
	// expire; a pause that ends a moment from now does.
	if _, err := a.p.js.PauseConsumer(ctx, PhaseStream(ph), ConsumerName(ph), time.Now().Add(20*time.Millisecond)); err != nil {
		return fmt.Errorf("resume %s: %w", ph, err)
	}
	// Return once the pause has run out, so what the caller reads next is true.
	cons, err := a.p.js.Consumer(ctx, PhaseStream(ph), ConsumerName(ph))
	if err != nil {
		return fmt.Errorf("resume %s: %w", ph, err)
	}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		info, err := cons.Info(ctx)
		if err != nil {
			return fmt.Errorf("resume %s: %w", ph, err)
		}
		if !info.Paused {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	a.p.metrics.AdminAction("phase_resume")
	return nil
}

// Phases reports every phase consumer.
func (a *Admin) Phases(ctx context.Context) ([]PhaseState, error) {
	out := make([]PhaseState, 0, capsule.NumPhases)
	for ph := capsule.Phase(0); ph < capsule.NumPhases; ph++ {
		cons, err := a.p.js.Consumer(ctx, PhaseStream(ph), ConsumerName(ph))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ph, err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ph, err)
		}
		out = append(out, PhaseState{
			Phase: int(ph), PhaseName: ph.String(), Consumer: ConsumerName(ph),
			Paused: info.Paused, Pending: info.NumPending, AckPending: info.NumAckPending,
		})
	}
	return out, nil
}
