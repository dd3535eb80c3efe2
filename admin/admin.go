package admin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/cas"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/phases"
	"github.com/sagad/sagad/status"
	"github.com/sagad/sagad/store"
)

// StateError refuses an admin action the capsule's state does not allow (a
// machine refusal); nothing was changed.
type StateError = machine.Refusal

// ErrRefused matches every refusal of an admin action by the capsule's state.
var ErrRefused = machine.ErrRefused

// Admin carries out operator actions: pause, resume, cancel, decide, phase
// pause. Each is a machine event written with a compare-and-set on the
// checkpoint, followed by idempotent effects (events, messages, outcome,
// lock release), so running an action again after an error finishes it,
// and racing actions resolve to one.
type Admin struct {
	st      *store.Store
	now     func() time.Time
	metrics *metrics.Metrics
	env     *phases.Env
	ended   func(cp *capsule.Checkpoint)
	// phasePaused is told of each phase pause and resume this Admin made.
	phasePaused func(ph capsule.Phase, paused bool)
}

func (a *Admin) tellEnded(cp *capsule.Checkpoint) {
	if a.ended != nil {
		a.ended(cp)
	}
}

// Config configures an [Admin].
type Config struct {
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Metrics counts the actions. Nil counts nothing.
	Metrics *metrics.Metrics
	// Env is the phases' environment, with which a replay's corrected
	// capsule is checked as RECEPTION checks an intake. Nil: the store's
	// locks and the built-in rules.
	Env *phases.Env
	// Ended is told of every capsule an action ended (cancel, reject), once:
	// the pipeline records the capsule's root span. Nil: nobody.
	Ended func(cp *capsule.Checkpoint)
	// PhasePaused is told of each phase this Admin paused (true) or
	// resumed (false), once the server has it: the pipeline's view of the
	// paused phases then holds this sagad's own pause at once, not when the
	// server's advisory arrives. Nil: nobody.
	PhasePaused func(ph capsule.Phase, paused bool)
}

// New returns an Admin working on st.
func New(st *store.Store, cfg Config) *Admin {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Env == nil {
		cfg.Env = &phases.Env{Locks: st.Locks, Now: cfg.Now, RetryDelay: time.Second}
	}
	return &Admin{st: st, now: cfg.Now, metrics: cfg.Metrics, env: cfg.Env, ended: cfg.Ended, phasePaused: cfg.PhasePaused}
}

// Open binds an Admin to the topology a sagad created (tests and tools;
// operators use sagad's admin service).
func Open(ctx context.Context, js jetstream.JetStream) (*Admin, error) {
	st, err := store.Open(ctx, js)
	if err != nil {
		return nil, err
	}
	return New(st, Config{}), nil
}

// Apply applies ev to the checkpoint of id (a capsule id or key) through
// [store.Store.Apply]: on a conflict the checkpoint is read again and ev
// applied again, so the machine judges ev against the checkpoint actually
// written.
func (a *Admin) Apply(ctx context.Context, id string, ev machine.Event) (machine.Result, error) {
	found, err := a.st.Checkpoints.Find(ctx, id)
	if err != nil {
		return machine.Result{}, err
	}
	res, err := a.st.Apply(ctx, found.Key, ev, a.now())
	if errors.Is(err, cas.ErrExhausted) {
		return machine.Result{}, fmt.Errorf("%s: checkpoint keeps changing, try again: %w", id, err)
	}
	return res, err
}

// adminEvent records an operator's action on cp. at is when sagad took the
// request, read before the transition it causes: histories merge events by
// time, and the action must come before the transition's own events.
func (a *Admin) adminEvent(ctx context.Context, cp *capsule.Checkpoint, at time.Time, kind capsule.EventKind, id, detail, said, by string, findings []capsule.Finding) error {
	return a.st.PublishEvent(ctx, capsule.Event{
		ID: cp.Key + ".admin." + id + "." + string(kind), Kind: kind, CapsuleID: cp.CapsuleID, Key: cp.Key,
		Phase: cp.State.Phase, PhaseName: cp.State.Phase.String(), Cycle: cp.State.Cycle, TraceID: cp.TraceID,
		Detail: detail, Said: said, By: by, Findings: findings, At: at.UTC(),
	})
}

// Pause parks the capsule with operator_manual. A capsule inside a phase
// finishes that phase's step first and parks at the next one.
func (a *Admin) Pause(ctx context.Context, id, reason, by string) (status.Status, error) {
	res, err := a.Apply(ctx, id, machine.Pause{Reason: reason, By: by})
	if err != nil {
		return status.Status{}, err
	}
	cp := res.Checkpoint
	if cp.State.Pause != nil && cp.State.Pause.ResumeToken == "" {
		if err := a.st.EmitParked(ctx, cp); err != nil {
			return status.Of(cp), err
		}
	}
	if res.Changed {
		a.metrics.Paused(capsule.TriggerOperatorManual)
	}
	a.metrics.AdminAction(metrics.ActionPause)
	return status.Of(cp), nil
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
	// Extend, when Deadline is nil, moves the deadline to now (sagad's
	// clock) plus Extend.
	Extend time.Duration
	// Force resumes a capsule waiting for accepted external work, which
	// runs its executor again for the cycle.
	Force bool
	// Answer is a person's answer to the pause, recorded with By in the
	// checkpoint for the next executor call (operator_answer); "" keeps
	// the one recorded.
	Answer string
}

// Resume continues a paused capsule exactly where it stopped: it marks a
// resume token in the checkpoint, sends the capsule to its phase with that
// token, and flips it back to in_progress. If it dies half-way, the phase
// message (which only the token lets through) finishes the resume, and
// running Resume again re-sends the same token.
func (a *Admin) Resume(ctx context.Context, id string, opts ResumeOptions) (status.Status, error) {
	return a.resume(ctx, id, "resume", capsule.Paused, opts)
}

// ResumeWaiting takes a capsule waiting for its dependencies, or for its
// wave's capacity, back to AUTOMATED_GATES once they completed or the wave
// has room (the sweeper's action).
func (a *Admin) ResumeWaiting(ctx context.Context, id string, opts ResumeOptions) (status.Status, error) {
	return a.resume(ctx, id, "resume", capsule.Waiting, opts)
}

func (a *Admin) resume(ctx context.Context, id, action string, from capsule.State, opts ResumeOptions) (status.Status, error) {
	if from == capsule.Paused && opts.Answer != "" {
		// A question of a running call's agent is answered, not resumed:
		// the call goes on by itself.
		cp, err := a.st.Checkpoints.Find(ctx, id)
		if err != nil {
			return status.Status{}, err
		}
		if asksAPerson(cp, opts.Answer) {
			return a.answerQuery(ctx, cp, opts)
		}
	}
	at := a.now()
	ev, err := a.resumeRequest(ctx, id, action, from, opts, at)
	if err != nil {
		return status.Status{}, err
	}
	res, err := a.Apply(ctx, id, ev)
	if err != nil {
		return status.Status{}, err
	}
	cp := res.Checkpoint
	// The token in the checkpoint: ours, or that of a resume in flight,
	// which this one finishes.
	token, trigger := cp.State.Pause.ResumeToken, cp.State.Pause.Trigger
	// The event goes out before the phase message: once the message is
	// sent the capsule may run to its end, and its history must read
	// accepted, then completed. The resume is decided (its token is in the
	// checkpoint), and a repeat sends the same event id, which the stream
	// drops.
	kind, detail, said := resumeRecord(cp, action, opts)
	if err := a.adminEvent(ctx, cp, at, kind, token, detail, said, opts.By, nil); err != nil {
		return status.Of(cp), err
	}
	if err := a.st.PublishPhase(ctx, cp, token); err != nil {
		return status.Of(cp), err
	}
	sentPhase, sentCycle := cp.State.Phase, cp.State.Cycle
	res, err = a.Apply(ctx, cp.Key, machine.Resume{Token: token})
	if err != nil {
		return status.Status{}, err
	}
	cp, flipped := res.Checkpoint, res.Changed
	if flipped && (cp.State.Phase != sentPhase || cp.State.Cycle != sentCycle) {
		// A phase that was running when the capsule was paused finished
		// meanwhile and moved it on: the message sent above is stale.
		if err := a.st.PublishPhase(ctx, cp, ""); err != nil {
			return status.Of(cp), err
		}
	}
	if err := a.st.Continuations.DeleteIfStale(ctx, cp.Key, cp); err != nil {
		return status.Of(cp), err
	}
	a.metrics.Resumed(trigger)
	if opts.By != capsule.BySagad {
		// sagad's own resumes (free locks, an arrived result) are no
		// operator's action.
		a.metrics.AdminAction(action)
	}
	return status.Of(cp), nil
}

// resumeRequest is the machine event of a person's (or sagad's) resume.
func (a *Admin) resumeRequest(ctx context.Context, id, action string, from capsule.State, opts ResumeOptions, at time.Time) (machine.RequestResume, error) {
	var answer *capsule.OperatorAnswer
	if strings.TrimSpace(opts.Answer) != "" {
		answer = &capsule.OperatorAnswer{Text: opts.Answer, By: opts.By, At: at.UTC()}
	}
	ev := machine.RequestResume{
		Action: action, From: from, Token: nuid.Next(), By: opts.By,
		Tokens: opts.Tokens, Dollars: opts.Dollars, Deadline: opts.Deadline, Force: opts.Force,
		Answer: answer,
	}
	if opts.Deadline == nil && opts.Extend > 0 {
		d := at.Add(opts.Extend)
		ev.Deadline = &d
	}
	if from != capsule.Waiting {
		// A person's resume past the deadline is refused unless it moves
		// the deadline: no agent call starts after it.
		found, err := a.st.Checkpoints.Find(ctx, id)
		if err != nil {
			return ev, err
		}
		if _, c, err := a.st.Raw(ctx, found.Key); err == nil && c != nil {
			ev.CapsuleDeadline = c.Deadline
		}
	}
	return ev, nil
}

// resumeRecord is what the history says of a resume of cp: its event kind,
// detail, and what the person said (an answer, or an accept's rationale).
func resumeRecord(cp *capsule.Checkpoint, action string, opts ResumeOptions) (kind capsule.EventKind, detail, said string) {
	detail = string(cp.State.Pause.Trigger)
	if by, verdict, ok := machine.AcceptedOver(cp); ok && action == "accept" {
		detail += ": accepted over " + string(verdict) + " by " + by
	}
	if opts.Reason != "" {
		detail += ": " + opts.Reason
	}
	kind, said = capsule.EventResumed, opts.Answer
	if action == "accept" {
		kind, said = capsule.EventOperatorAccepted, opts.Reason
	}
	return kind, detail, strings.TrimSpace(said)
}

// Cancel ends the capsule in cancelled and releases its locks, from any
// non-terminal state. Cancelling a cancelled capsule re-emits its effects.
func (a *Admin) Cancel(ctx context.Context, id, reason, by string) (status.Status, error) {
	detail := "cancelled"
	if by != "" {
		detail += " by " + by
	}
	if reason != "" {
		detail += ": " + reason
	}
	return a.End(ctx, id, machine.End{State: capsule.Cancelled, Detail: detail})
}

// End ends a non-terminal capsule where it stands (machine.End), with its
// effects.
func (a *Admin) End(ctx context.Context, id string, ev machine.End) (status.Status, error) {
	res, err := a.Apply(ctx, id, ev)
	if err != nil {
		return status.Status{}, err
	}
	cp := res.Checkpoint
	if err := a.ReemitEnd(ctx, cp); err != nil {
		return status.Of(cp), err
	}
	if err := a.st.Continuations.Delete(ctx, cp.Key); err != nil {
		return status.Of(cp), err
	}
	if res.Changed {
		a.metrics.Ended(ev.State, capsule.ParseHaltReason(cp.State.HaltReason))
		a.tellEnded(cp)
	}
	if ev.State == capsule.Cancelled {
		a.metrics.AdminAction(metrics.ActionCancel)
	}
	return status.Of(cp), nil
}

// ReemitEnd emits the effects of an ended capsule's last transition again
// (events, outcome, lock release); all de-duplicated.
func (a *Admin) ReemitEnd(ctx context.Context, cp *capsule.Checkpoint) error {
	if len(cp.History) == 0 || !cp.State.Status.Terminal() {
		return nil
	}
	tr := cp.History[len(cp.History)-1]
	raw, c, err := a.st.Raw(ctx, cp.Key)
	if err != nil {
		return err
	}
	var paths []string
	if c != nil {
		paths = c.Constraints.ResourceLocksRequired
	}
	return a.st.Emit(ctx, cp, 0, &tr, raw, paths)
}

// Decisions an operator can take on a capsule waiting_for_operator.
const (
	DecisionAccept = "accept"
	DecisionRevise = "revise"
	DecisionReject = "reject"
)

// Decide settles the operator gate: accept goes on to HANDOFF; revise sends
// the capsule back to EXECUTION as a new cycle with the rationale as the
// review's findings (Rule 12 still applies: past the last cycle it halts
// with max_cycles_exceeded); reject halts it with operator_rejected. A
// capsule not waiting is refused, unchanged.
func (a *Admin) Decide(ctx context.Context, id, decision, rationale, by string) (status.Status, error) {
	switch decision {
	case DecisionAccept:
		return a.resume(ctx, id, "accept", capsule.WaitingForOperator, ResumeOptions{By: by, Reason: rationale})
	case DecisionRevise:
	case DecisionReject:
		return a.reject(ctx, id, rationale, by)
	default:
		return status.Status{}, fmt.Errorf("decision %q: want accept, revise or reject", decision)
	}
	found, err := a.st.Checkpoints.Find(ctx, id)
	if err != nil {
		return status.Status{}, err
	}
	raw, c, err := a.st.Raw(ctx, found.Key)
	if err != nil {
		return status.Status{}, err
	}
	if c == nil {
		return status.Status{}, fmt.Errorf("capsule bytes of %s are unreadable", found.Key)
	}
	token, at := nuid.Next(), a.now()
	res, err := a.Apply(ctx, found.Key, machine.Revise{Rationale: rationale, By: by, CycleLimit: c.CycleLimit() + found.CycleBase})
	if err != nil {
		return status.Status{}, err
	}
	cp, changed := res.Checkpoint, res.Changed
	var review []capsule.Finding
	if changed {
		// The findings the next cycle addresses: the reviewer's, and the
		// operator's revision the machine just recorded as the last review.
		n := len(cp.State.Reviews)
		if n >= 2 {
			review = append(review, cp.State.Reviews[n-2].Findings...)
		}
		review = append(review, cp.State.Reviews[n-1].Findings...)
	}
	if !changed && machine.RevisedBy(cp) == "" {
		return status.Of(cp), nil
	}
	tr := cp.History[len(cp.History)-1]
	if !changed {
		review = cp.LastReviewFindings()
		rationale = strings.TrimPrefix(review[len(review)-1].Message, "operator revision: ")
		token = "rerun-" + strconv.Itoa(len(cp.History))
	}
	if err := a.adminEvent(ctx, cp, at, capsule.EventRevisionTriggered, token, rationale, rationale, by, review); err != nil {
		return status.Of(cp), err
	}
	if err := a.st.Emit(ctx, cp, 0, &tr, raw, c.Constraints.ResourceLocksRequired); err != nil {
		return status.Of(cp), err
	}
	if changed {
		// A revise leaves the gate as an accept does: the gate's pauses
		// and resumes balance on the dashboard.
		a.metrics.Resumed(capsule.TriggerOperatorGate)
	}
	a.metrics.AdminAction(metrics.ActionRevise)
	return status.Of(cp), nil
}

// reject halts a capsule waiting_for_operator with operator_rejected and
// emits its ending (outcome, event); running it again finishes it.
func (a *Admin) reject(ctx context.Context, id, rationale, by string) (status.Status, error) {
	at := a.now()
	res, err := a.Apply(ctx, id, machine.Reject{Rationale: rationale, By: by})
	if err != nil {
		return status.Status{}, err
	}
	cp := res.Checkpoint
	if err := a.adminEvent(ctx, cp, at, capsule.EventOperatorRejected, "reject", rationale, rationale, by, nil); err != nil {
		return status.Of(cp), err
	}
	if err := a.ReemitEnd(ctx, cp); err != nil {
		return status.Of(cp), err
	}
	if res.Changed {
		a.metrics.Ended(capsule.Halted, capsule.OperatorRejected())
		a.tellEnded(cp)
	}
	a.metrics.AdminAction(metrics.ActionReject)
	return status.Of(cp), nil
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
	// Verdict and Findings are the review that waits for the operator's
	// decision (waiting_for_operator only).
	Verdict  capsule.Verdict   `json:"verdict,omitempty"`
	Findings []capsule.Finding `json:"findings,omitempty"`
	// Query is the agent's question that waits for an answer (agent_query
	// only): the oldest open one, which `sagactl resume ID --answer TEXT`
	// answers.
	Query *PendingQuery `json:"query,omitempty"`
}

// PendingQuery is an agent's question in a [PendingItem].
type PendingQuery struct {
	ID      string    `json:"id"`
	Agent   string    `json:"agent"`
	Prompt  string    `json:"prompt"`
	Since   time.Time `json:"since"`
	AgeSecs int64     `json:"age_seconds"`
	// Open counts the call's open questions, this one included.
	Open int `json:"open,omitempty"`
}

// Pending lists what waits for a human, oldest first: capsules waiting for an
// operator decision, and paused ones only a person can resume (every trigger
// the sweeper does not resume, but blocked_external on accepted work, which
// resumes when its result arrives). A composition's steps of a superseded
// loop round or run are left out: they are history of their run (see
// [SupersededIDs]).
func (a *Admin) Pending(ctx context.Context) ([]PendingItem, error) {
	all, err := a.st.Checkpoints.List(ctx)
	if err != nil {
		return nil, err
	}
	now := a.now()
	superseded := a.supersededCheck()
	var out []PendingItem
	for _, cp := range all {
		if item, ok := PendingOf(cp, now); ok && !superseded.of(ctx, cp) {
			out = append(out, item)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Since.Before(out[j].Since) })
	return out, nil
}

// PendingOf reports whether cp waits for a human, and the item [Admin.Pending]
// lists for it then: waiting for an operator decision (with the verdict and
// findings of the review that waits), or paused on any trigger the sweeper
// does not resume (capsule.TriggerTable's Resumer), but work an executor
// accepted (it resumes when its result arrives). The console's inbox uses it
// on the checkpoints it keeps in memory.
func PendingOf(cp *capsule.Checkpoint, now time.Time) (PendingItem, bool) {
	st := cp.State
	if st.Pause == nil || (st.Status != capsule.Paused && st.Status != capsule.WaitingForOperator && st.Status != capsule.Waiting) {
		return PendingItem{}, false
	}
	if st.Pause.Trigger.Info().Resumer == capsule.ResumerSweeper || st.AwaitsExternal() {
		return PendingItem{}, false
	}
	item := PendingItem{
		CapsuleID: cp.CapsuleID, Key: cp.Key, State: st.Status, Trigger: st.Pause.Trigger, Reason: st.Pause.Reason,
		By: st.Pause.By, Phase: int(st.Phase), PhaseName: st.Phase.String(), Cycle: st.Cycle,
		Since: st.Pause.At, AgeSecs: int64(now.Sub(st.Pause.At).Seconds()),
	}
	if st.Status == capsule.WaitingForOperator && len(st.Reviews) > 0 {
		last := st.Reviews[len(st.Reviews)-1]
		item.Verdict, item.Findings = last.Verdict, last.Findings
	}
	if q, ok := st.OpenQuery(""); ok {
		item.Query = &PendingQuery{ID: q.ID, Agent: q.Agent, Prompt: q.Prompt, Since: q.At,
			AgeSecs: int64(now.Sub(q.At).Seconds()), Open: len(st.AgentQueries)}
	}
	return item, true
}

// PhaseState is one phase consumer as `sagactl phase list` shows it. A
// paused phase carries who paused it, when and why (PausedAt is absent for a
// pause sagad cannot date).
type PhaseState struct {
	Phase      int    `json:"phase"`
	PhaseName  string `json:"phase_name"`
	Consumer   string `json:"consumer"`
	Paused     bool   `json:"paused"`
	Pending    uint64 `json:"pending"`
	AckPending int    `json:"ack_pending"`
	// PausedBy and PauseReason are what `sagactl phase pause --by --reason`
	// recorded; PausedAt is when.
	PausedBy    string     `json:"paused_by,omitempty"`
	PausedAt    *time.Time `json:"paused_at,omitempty"`
	PauseReason string     `json:"pause_reason,omitempty"`
}

// PausePhase stops every sagad from consuming phase ph; what is queued stays.
func (a *Admin) PausePhase(ctx context.Context, ph capsule.Phase) error {
	return a.PausePhaseBy(ctx, ph, "", "")
}

// PausePhaseBy pauses phase ph as [Admin.PausePhase] does and records who
// paused it and why in the phase consumer's metadata
// ([capsule.PhasePause]), where `sagactl pending`, the console's inbox and
// sagad_phase_paused_seconds read it. The record is written before the
// pause: a crash between the two leaves a record that nothing shows (only a
// paused phase's record is read). Pausing a phase already paused keeps the
// first record, so a repeated request does not move the time.
func (a *Admin) PausePhaseBy(ctx context.Context, ph capsule.Phase, by, reason string) error {
	js := a.st.JetStream()
	stream, name := store.PhaseStream(ph), store.ConsumerName(ph)
	cons, err := js.Consumer(ctx, stream, name)
	if err != nil {
		return fmt.Errorf("pause %s: %w", ph, err)
	}
	info := cons.CachedInfo()
	if _, found, _ := capsule.PhasePauseOf(info.Config.Metadata); !info.Paused || !found {
		cfg := info.Config
		cfg.Metadata = capsule.PhasePause{By: by, Reason: reason, At: a.now().UTC()}.SetMetadata(maps.Clone(cfg.Metadata))
		if _, err := js.UpdateConsumer(ctx, stream, cfg); err != nil {
			return fmt.Errorf("pause %s: record who paused: %w", ph, err)
		}
	}
	if _, err := js.PauseConsumer(ctx, stream, name, a.now().Add(capsule.PhasePauseHorizon)); err != nil {
		return fmt.Errorf("pause %s: %w", ph, err)
	}
	if a.phasePaused != nil {
		a.phasePaused(ph, true)
	}
	a.metrics.AdminAction(metrics.ActionPhasePause)
	return nil
}

// ResumePhase lets every sagad consume phase ph again, then removes the
// pause's record (a crash between the two leaves a record no one shows).
func (a *Admin) ResumePhase(ctx context.Context, ph capsule.Phase) error {
	if err := a.unpause(ctx, ph); err != nil {
		return err
	}
	if a.phasePaused != nil {
		a.phasePaused(ph, false)
	}
	js := a.st.JetStream()
	cons, err := js.Consumer(ctx, store.PhaseStream(ph), store.ConsumerName(ph))
	if err != nil {
		return fmt.Errorf("resume %s: %w", ph, err)
	}
	if cfg := cons.CachedInfo().Config; capsule.ClearPhasePause(cfg.Metadata) {
		if _, err := js.UpdateConsumer(ctx, store.PhaseStream(ph), cfg); err != nil {
			return fmt.Errorf("resume %s: clear who paused: %w", ph, err)
		}
	}
	a.metrics.AdminAction(metrics.ActionPhaseResume)
	return nil
}

func (a *Admin) unpause(ctx context.Context, ph capsule.Phase) error {
	// Clearing the pause outright does not wake pulls already waiting on
	// the server (nats-server 2.15), which would then idle until they
	// expire; a pause that ends a moment from now does.
	if _, err := a.st.JetStream().PauseConsumer(ctx, store.PhaseStream(ph), store.ConsumerName(ph), time.Now().Add(20*time.Millisecond)); err != nil {
		return fmt.Errorf("resume %s: %w", ph, err)
	}
	// Return once the pause has run out, so what the caller reads next is true.
	cons, err := a.st.JetStream().Consumer(ctx, store.PhaseStream(ph), store.ConsumerName(ph))
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
	return nil
}

// Phases reports every phase consumer.
func (a *Admin) Phases(ctx context.Context) ([]PhaseState, error) {
	return Phases(ctx, a.st.JetStream())
}

// Phases reports every phase consumer on js, with the pause records of the
// paused ones; the console reads it without an [Admin].
func Phases(ctx context.Context, js jetstream.JetStream) ([]PhaseState, error) {
	out := make([]PhaseState, 0, capsule.NumPhases)
	for ph := capsule.Phase(0); ph < capsule.NumPhases; ph++ {
		cons, err := js.Consumer(ctx, store.PhaseStream(ph), store.ConsumerName(ph))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ph, err)
		}
		info := cons.CachedInfo() // Consumer just read it
		st := PhaseState{
			Phase: int(ph), PhaseName: ph.String(), Consumer: store.ConsumerName(ph),
			Paused: info.Paused, Pending: info.NumPending, AckPending: info.NumAckPending,
		}
		if info.Paused {
			if p, found, err := capsule.PhasePauseOf(info.Config.Metadata); found && err == nil {
				st.PausedBy, st.PauseReason = p.By, p.Reason
			}
			if at := capsule.PhasePausedAt(info.Config.Metadata, info.Config.PauseUntil, time.Now()); !at.IsZero() {
				st.PausedAt = &at
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// PausedPhases returns the paused phases of states, in phase order.
func PausedPhases(states []PhaseState) []PhaseState {
	var out []PhaseState
	for _, s := range states {
		if s.Paused {
			out = append(out, s)
		}
	}
	return out
}
