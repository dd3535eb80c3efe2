package machine

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sagad/sagad/capsule"
)

// Event is something that may change a checkpoint. Every change to a
// checkpoint is one of the events below, applied by [Apply].
type Event interface {
	// Name is the event's name in errors and logs, e.g. "decide".
	Name() string
}

// Decide records a phase's decision on (Phase, Cycle): RECEPTION's on a new
// checkpoint, or any later phase's. Holder is the delivery's claim token;
// Claimed says that delivery took the cycle's claim, which must then still
// be its own.
type Decide struct {
	Phase    capsule.Phase
	Cycle    int
	Decision Decision
	Holder   string
	Claimed  bool
	// Then, when set, is a claim on the phase the decision leads to, taken
	// by the same write: EXECUTION's result taking REVIEW's claim of the
	// cycle for the first delivery of the message it sends (which then
	// calls the reviewer without a write of its own). It is taken only
	// when the capsule goes on in progress at (Then.Phase, Then.Cycle): a
	// capsule that parks, waits, halts or ends, or a person paused, is
	// left unclaimed as before.
	Then *Claim
}

// Claim takes the claim on (Phase, Cycle) for Holder until ExpiresAt,
// before the phase calls an agent. EXECUTION's claim also records the locks
// it is about to hold.
type Claim struct {
	Phase     capsule.Phase
	Cycle     int
	Holder    string
	ExpiresAt time.Time
	Locks     []string
	// CallTokenHash is the hash of the call_token the claim's executor
	// calls carry (see [capsule.ExecutionClaim]).
	CallTokenHash string
}

// Renew extends Holder's claim on Cycle to ExpiresAt.
type Renew struct {
	Cycle     int
	Holder    string
	ExpiresAt time.Time
}

// RequestResume is the first step of an operator's resume (or accept, From
// waiting_for_operator): it marks the capsule with a resume token — Token,
// or the one of a resume already in flight — and lifts the pause's cause.
type RequestResume struct {
	// Action names the admin action in refusals ("resume", "accept").
	Action string
	From   capsule.State
	Token  string
	// Tokens and Dollars raise the caps; Deadline moves the deadline.
	Tokens   int64
	Dollars  float64
	Deadline *time.Time
	// Force resumes a capsule whose executor accepted work whose result has
	// not arrived (its executor runs again for the cycle).
	Force bool
	// CapsuleDeadline is the capsule's own deadline. When set, a person's
	// resume (From paused or waiting_for_operator) of a capsule whose
	// deadline in force has passed is refused unless Deadline moves it
	// into the future: no agent call starts after the deadline.
	CapsuleDeadline time.Time
	// By is who accepts (Action "accept"): an accept over a verdict other
	// than APPROVED is recorded as that person's approval of the cycle's
	// artifact, which makes it the capsule's final one.
	By string
	// Answer is what the operator answered the pause (an exit-11
	// escalation's resolution): recorded as the checkpoint's
	// OperatorAnswer, which the next executor call carries. Nil keeps the
	// one recorded.
	Answer *capsule.OperatorAnswer
}

// Resume takes a capsule marked with Token back to in_progress. With At
// set, only where it was paused (the phase message carrying the token);
// without, wherever it stands now (the resume's own second step).
type Resume struct {
	Token string
	At    *Position
}

// Position is a (phase, cycle) pair.
type Position struct {
	Phase capsule.Phase
	Cycle int
}

// Pause parks the capsule with operator_manual.
type Pause struct {
	Reason string
	By     string
}

// End ends a capsule where it stands: cancelled (an operator), or halted
// with Detail as the reason (an overdue external result). With IfPausedAt
// set, only a capsule still paused since then, awaiting external work.
type End struct {
	State      capsule.State
	Detail     string
	IfPausedAt *time.Time
	// IfWaitingSince, when set, ends only a capsule still waiting (for its
	// dependencies, or its wave's capacity) since then.
	IfWaitingSince *time.Time
	// IfDeadlinePassed, when set to the capsule's own deadline, ends only a
	// capsule parked (paused, waiting, or waiting for an operator) whose
	// deadline in force (an operator's override, else this one) is not
	// after the event's time; with no Detail it halts
	// deadline_exceeded:<the phase it stands at>. The sweeper's check is
	// thus judged again on the checkpoint actually written: a resume that
	// moved the deadline meanwhile wins.
	IfDeadlinePassed *time.Time
}

// Revise is an operator's revise decision on a capsule waiting_for_operator:
// back to EXECUTION as a new cycle, or halted past CycleLimit (Rule 12).
type Revise struct {
	Rationale  string
	By         string
	CycleLimit int
}

// Reject is an operator's reject decision on a capsule waiting_for_operator:
// it halts with operator_rejected, the rationale recorded as the operator's
// review.
type Reject struct {
	Rationale string
	By        string
}

// RecordResult keeps the result of accepted external work for Cycle.
// TokenHash is the SHA-256 (lowercase hex) of the completion token the
// result came with: it must be the awaited call's
// (CheckpointState.AwaitingTokenHash), else the event is refused with
// [ErrUnauthenticated].
type RecordResult struct {
	Cycle     int
	Result    capsule.ExecutionResult
	TokenHash string
}

// Name implements Event.
func (Decide) Name() string { return "decide" }

// Name implements Event.
func (Claim) Name() string { return "claim" }

// Name implements Event.
func (Renew) Name() string { return "renew" }

// Name implements Event.
func (e RequestResume) Name() string {
	if e.Action != "" {
		return e.Action
	}
	return "resume"
}

// Name implements Event.
func (Resume) Name() string { return "resume" }

// Name implements Event.
func (Pause) Name() string { return "pause" }

// Name implements Event.
func (e End) Name() string {
	if e.State == capsule.Cancelled {
		return "cancel"
	}
	return "halt"
}

// Name implements Event.
func (Revise) Name() string { return "revise" }

// Name implements Event.
func (RecordResult) Name() string { return "record_result" }

// Name implements Event.
func (Reject) Name() string { return "reject" }

// Sentinel kinds of [Refusal]; match them with errors.Is.
var (
	// ErrStale: the checkpoint no longer stands where the event expects it
	// (the transition is recorded already, or the capsule moved on).
	ErrStale = errors.New("transition already recorded or capsule moved on")
	// ErrClaimHeld: another live holder has the cycle's claim.
	ErrClaimHeld = errors.New("execution claim held by another instance")
	// ErrClaimLost: the holder's claim was cleared or taken over.
	ErrClaimLost = errors.New("claim on the cycle lost")
	// ErrRefused: the capsule's state does not allow an operator's action.
	ErrRefused = errors.New("refused by the capsule's state")
	// ErrInvalid: the event itself is malformed (a bug or bad input).
	ErrInvalid = errors.New("invalid event")
	// ErrUnauthenticated: a result came without the completion token of
	// the call the capsule awaits (a forgery, or a superseded call's).
	ErrUnauthenticated = errors.New("completion token does not match the awaited call")
)

// Refusal is the typed error of an event that does not apply to a
// checkpoint. Nothing was changed.
type Refusal struct {
	Kind   error // one of the sentinels above
	Event  string
	Key    string
	State  capsule.State
	Hint   string
	Detail string
}

// Error reads as a sentence an operator can act on, e.g. "cannot cancel
// 0f8f…: the capsule is completed (it has ended)", or for the other kinds
// "cannot record result 0f8f…: claim on the cycle lost".
func (r *Refusal) Error() string {
	var b strings.Builder
	b.WriteString("cannot " + strings.ReplaceAll(r.Event, "_", " "))
	if r.Key != "" {
		b.WriteString(" " + r.Key)
	}
	if r.Kind == ErrRefused {
		fmt.Fprintf(&b, ": the capsule is %s", r.State)
		if r.Hint != "" {
			b.WriteString(" (" + r.Hint + ")")
		}
		return b.String()
	}
	fmt.Fprintf(&b, ": %s", r.Kind)
	if r.Detail != "" {
		b.WriteString(": " + r.Detail)
	}
	return b.String()
}

// Is makes errors.Is match the refusal's kind.
func (r *Refusal) Is(target error) bool { return target == r.Kind }

func refuse(kind error, ev Event, cp *capsule.Checkpoint, detail string) *Refusal {
	return &Refusal{Kind: kind, Event: ev.Name(), Key: cp.Key, State: cp.State.Status, Detail: detail}
}

func refused(ev Event, cp *capsule.Checkpoint, hint string) *Refusal {
	return &Refusal{Kind: ErrRefused, Event: ev.Name(), Key: cp.Key, State: cp.State.Status, Hint: hint}
}

// Result is what [Apply] returns for an event that applies.
type Result struct {
	// Checkpoint is the changed copy (the input when Changed is false).
	Checkpoint *capsule.Checkpoint
	// Changed says there is something to write. An event that finds its
	// change already made (a repeated cancel, a completion recorded) applies
	// without a change.
	Changed bool
	// Transition is the history entry the event appended, if any: the
	// changed checkpoint's own last entry, to read, never to write through.
	Transition *capsule.Transition
	// Effects are what the changed checkpoint calls for (see EffectsOf).
	Effects Effects
}

// Apply applies ev to cp at now. It never changes cp: the result holds a
// changed copy. It is pure and deterministic, so applying the same event to
// the same checkpoint always gives the same result.
func Apply(cp *capsule.Checkpoint, ev Event, now time.Time) (Result, error) {
	if cp == nil {
		return Result{}, &Refusal{Kind: ErrInvalid, Event: ev.Name(), Detail: "no checkpoint"}
	}
	now = now.UTC()
	out := shallow(cp)
	var (
		tr  *capsule.Transition
		err error
	)
	changed := true
	switch e := ev.(type) {
	case Decide:
		tr, err = decide(out, e, now)
	case Claim:
		err = claim(out, e, now)
	case Renew:
		err = renew(out, e)
	case RequestResume:
		changed, err = requestResume(out, e, now)
	case Resume:
		changed, err = resume(out, e)
	case Pause:
		changed, err = pause(out, e, now)
	case End:
		changed, tr, err = end(out, e, now)
	case Revise:
		changed, tr, err = revise(out, e, now)
	case Reject:
		changed, tr, err = reject(out, e, now)
	case RecordResult:
		changed, err = recordResult(out, e)
	case RecordAttempt:
		changed, err = recordAttempt(out, e, now)
	case Replay:
		changed, tr, err = replay(out, e, now)
	case Ask:
		changed, err = ask(out, e, now)
	case Answer:
		changed, err = answer(out, e, now)
	default:
		return Result{}, &Refusal{Kind: ErrInvalid, Event: fmt.Sprintf("%T", ev), Key: cp.Key, Detail: "unknown event"}
	}
	if err != nil {
		return Result{}, err
	}
	if !changed {
		return Result{Checkpoint: cp, Effects: EffectsOf(cp, nil)}, nil
	}
	switch ev.(type) {
	case Claim, Renew:
		// A claim changes no state a person sees (PIPELINE §5: timestamps
		// change only when state changes).
	default:
		out.UpdatedAt = now
	}
	return Result{Checkpoint: out, Changed: true, Transition: tr, Effects: EffectsOf(out, tr)}, nil
}

// shallow is the copy of cp a transition is made on: cp's own values, its
// state's slices clipped so that an append makes a new array, sharing
// everything else with cp. A transition replaces what it changes (a new
// slice, a new pointer) and never writes through what it shares — renew and
// requestResume copy the claim, the pause and the overrides they change —
// so cp, which may be the process's cached checkpoint, stays as it was. A
// deep clone (capsule.Checkpoint.Clone) per Apply was 5 % of sagad's
// allocation. The history keeps its room: it is appended to only by
// record, which writes a slot of the room only once (history.go).
func shallow(cp *capsule.Checkpoint) *capsule.Checkpoint {
	out := *cp
	st := &out.State
	st.LocksHeld = slices.Clip(st.LocksHeld)
	st.ArtifactRefs = slices.Clip(st.ArtifactRefs)
	st.Findings = slices.Clip(st.Findings)
	st.Reviews = slices.Clip(st.Reviews)
	st.Warned = slices.Clip(st.Warned)
	st.AttemptLog = slices.Clip(st.AttemptLog)
	st.WaitingFor = slices.Clip(st.WaitingFor)
	st.AgentQueries = slices.Clip(st.AgentQueries)
	return &out
}

// standsAt reports whether the capsule is still at (ph, cycle) and not
// finished: in progress, or paused there while a phase ran, by an operator
// or by a question of the phase's agent.
func standsAt(cp *capsule.Checkpoint, ph capsule.Phase, cycle int) bool {
	st := cp.State
	if st.Phase != ph || st.Cycle != cycle {
		return false
	}
	if st.Status == capsule.InProgress {
		return true
	}
	if st.Status != capsule.Paused || st.Pause == nil {
		return false
	}
	i := st.Pause.Trigger.Info()
	return i.Operator || i.CallRuns
}

// Current reports whether cp waits, in progress, for phase ph of cycle.
func Current(cp *capsule.Checkpoint, ph capsule.Phase, cycle int) bool {
	st := cp.State
	return st.Status == capsule.InProgress && st.Phase == ph && st.Cycle == cycle
}

// Resumable reports whether a phase message carrying token may resume the
// capsule paused (or waiting) at (ph, cycle).
func Resumable(cp *capsule.Checkpoint, ph capsule.Phase, cycle int, token string) bool {
	st := cp.State
	return token != "" && (st.Status == capsule.Paused || st.Status == capsule.WaitingForOperator || st.Status == capsule.Waiting) &&
		st.Phase == ph && st.Cycle == cycle && st.Pause != nil && st.Pause.ResumeToken == token
}

func decide(cp *capsule.Checkpoint, e Decide, now time.Time) (*capsule.Transition, error) {
	d := e.Decision
	if d.Action == Retry || d.Action < Advance || d.Action > Park {
		return nil, refuse(ErrInvalid, e, cp, "a "+d.Action.String()+" decision records nothing")
	}
	if d.Action == LoopBack && e.Phase != capsule.ReviewPhase {
		return nil, refuse(ErrInvalid, e, cp, "only REVIEW loops back")
	}
	if d.Action == Halt && d.Halt.IsZero() {
		return nil, refuse(ErrInvalid, e, cp, "a halt needs a reason")
	}
	if !standsAt(cp, e.Phase, e.Cycle) {
		return nil, refuse(ErrStale, e, cp, fmt.Sprintf("%s cycle %d", e.Phase, e.Cycle))
	}
	ex := cp.State.Execution
	if e.Claimed {
		if ex == nil || ex.Holder != e.Holder || ex.Cycle != e.Cycle {
			// Our claim was cleared (cancel) or taken over: our result does
			// not count.
			return nil, refuse(ErrStale, e, cp, "the claim is no longer this delivery's")
		}
	} else if ex != nil && ex.Cycle == e.Cycle && ex.Holder != e.Holder && now.Before(ex.ExpiresAt) {
		// Another delivery holds the claim on this cycle: its result is
		// the one that counts.
		return nil, refuse(ErrStale, e, cp, "another delivery holds the claim")
	}
	// The call ended: its agent's open questions went with it.
	callEnded(&cp.State)
	tr := applyDecision(cp, e.Phase, e.Cycle, d, now)
	if c := e.Then; c != nil && Current(cp, c.Phase, c.Cycle) && c.Phase == e.Phase+1 && c.Cycle == e.Cycle {
		cp.State.Execution = &capsule.ExecutionClaim{Cycle: c.Cycle, Holder: c.Holder, ExpiresAt: c.ExpiresAt, CallTokenHash: c.CallTokenHash}
	}
	return tr, nil
}

// applyDecision records decision d, taken by phase p on cycle, in cp. It
// returns the transition appended to the history, or nil when d parks the
// capsule without one. A capsule paused by an operator while its phase
// ran keeps its pause: the phase's work is recorded and the capsule parks
// at the next phase.
func applyDecision(cp *capsule.Checkpoint, p capsule.Phase, cycle int, d Decision, now time.Time) *capsule.Transition {
	st := &cp.State
	d.Record.ApplyTo(st)
	if len(d.Findings) > 0 {
		// Whatever a phase or an agent found, the checkpoint stays one
		// NATS message.
		st.Findings = capsule.CapFindings(d.Findings, capsule.MaxFindings)
	}
	st.Execution = nil
	if d.Action == Park && d.Trigger.Info().State == capsule.Waiting {
		// Waiting is not paused: nothing to resume by hand, the sweeper
		// takes it on once the dependencies completed (or the wave has
		// room).
		st.Status = capsule.Waiting
		st.Pause = &capsule.PauseInfo{Trigger: d.Trigger, Reason: d.Reason, By: capsule.BySagad, At: now}
		st.WaitingFor = append([]string(nil), d.WaitFor...)
		return nil
	}
	if d.Action == Park {
		// An operator's pause stands over sagad's own reasons to park.
		if st.Status != capsule.Paused || st.Pause == nil || !st.Pause.Trigger.Info().Operator {
			park(st, d.Trigger, d.Reason, capsule.BySagad, now)
		}
		if p == capsule.Execution && !d.Trigger.Info().KeepsLocks {
			st.LocksHeld = []string{}
		}
		return nil
	}
	tr := capsule.Transition{Phase: p, PhaseName: p.String(), Cycle: cycle, At: now, Detail: estimatedDetail(d.Record)}
	switch d.Action {
	case Advance:
		if p == capsule.Handoff {
			tr.Outcome = capsule.OutcomeCompleted
			st.Status = capsule.Completed
			st.Progress = 100
			break
		}
		tr.Outcome = capsule.OutcomePassed
		st.Phase = p + 1
		if p == capsule.AutomatedGates {
			st.Cycle = max(cycle, 1) // a replayed run's gates stand at its first cycle
		}
		st.Progress = p.Progress()
	case LoopBack:
		tr.Outcome = capsule.OutcomeLoopedBack
		st.Phase = capsule.Execution
		st.Cycle = cycle + 1
	case Halt:
		tr.Outcome = capsule.OutcomeHalted
		tr.Detail = d.Halt.String()
		st.Status = capsule.Halted
		st.HaltReason = d.Halt.String()
	}
	st.PhaseName = st.Phase.String()
	if p == capsule.Execution || st.Status.Terminal() {
		st.LocksHeld = []string{}
	}
	if st.Status.Terminal() {
		st.Pause = nil
	} else if d.Wait {
		st.Status = capsule.WaitingForOperator
		st.Pause = &capsule.PauseInfo{Trigger: capsule.TriggerOperatorGate, Reason: "review.operator_gate: accept, revise or reject", By: capsule.BySagad, At: now}
	} else if d.Trigger != "" && st.Status == capsule.InProgress {
		park(st, d.Trigger, d.Reason, capsule.BySagad, now)
	}
	return record(cp, tr)
}

// park pauses the capsule at its current phase.
func park(st *capsule.CheckpointState, t capsule.Trigger, reason, by string, now time.Time) {
	st.Status = capsule.Paused
	st.Pause = &capsule.PauseInfo{Trigger: t, Reason: reason, By: by, At: now}
	if t.Info().Once && !st.HasWarned(t) {
		st.Warned = append(st.Warned, t)
	}
}

func claim(cp *capsule.Checkpoint, e Claim, now time.Time) error {
	if !Running(cp, e.Phase, e.Cycle) {
		return refuse(ErrStale, e, cp, fmt.Sprintf("%s cycle %d", e.Phase, e.Cycle))
	}
	if ex := cp.State.Execution; ex != nil && ex.Cycle == e.Cycle && ex.Holder != e.Holder && now.Before(ex.ExpiresAt) {
		return refuse(ErrClaimHeld, e, cp, fmt.Sprintf("%s until %s", ex.Holder, ex.ExpiresAt.Format(time.RFC3339)))
	}
	// A new claim is a new call: the one that asked a question died with
	// its holder (its lease ran out).
	callEnded(&cp.State)
	cp.State.Execution = &capsule.ExecutionClaim{Cycle: e.Cycle, Holder: e.Holder, ExpiresAt: e.ExpiresAt, CallTokenHash: e.CallTokenHash}
	if e.Phase == capsule.Execution {
		cp.State.LocksHeld = append([]string{}, e.Locks...)
	}
	return nil
}

func renew(cp *capsule.Checkpoint, e Renew) error {
	ex := cp.State.Execution
	if ex == nil || ex.Holder != e.Holder || ex.Cycle != e.Cycle {
		// Cancelled, or taken over after our lease lapsed: stop working.
		return refuse(ErrClaimLost, e, cp, "")
	}
	renewed := *ex // shared with Apply's input
	renewed.ExpiresAt = e.ExpiresAt
	cp.State.Execution = &renewed
	return nil
}

func requestResume(cp *capsule.Checkpoint, e RequestResume, now time.Time) (bool, error) {
	st := &cp.State
	if e.From != capsule.Paused && e.From != capsule.WaitingForOperator && e.From != capsule.Waiting {
		return false, refuse(ErrInvalid, e, cp, "resume from "+string(e.From))
	}
	if st.Status != e.From || st.Pause == nil {
		hint := ""
		if st.Status == capsule.WaitingForOperator {
			hint = "it waits for an operator decision: sagactl decide ID accept|revise"
		}
		return false, refused(e, cp, hint)
	}
	if i := st.Pause.Trigger.Info(); i.CallRuns {
		return false, refused(e, cp, i.PauseRefused)
	}
	if e.Tokens < 0 || e.Dollars < 0 {
		return false, refuse(ErrInvalid, e, cp, "raised caps must be positive")
	}
	if e.Token == "" {
		return false, refuse(ErrInvalid, e, cp, "no resume token")
	}
	if st.AwaitingCycle > 0 && (st.Result == nil || st.Result.Cycle != st.AwaitingCycle) && !e.Force {
		return false, refused(e, cp, "its executor accepted the work and its result has not arrived; --force runs the executor again")
	}
	if e.Deadline != nil && !e.Deadline.After(now) {
		return false, refused(e, cp, "the new deadline "+e.Deadline.UTC().Format(time.RFC3339)+" is not in the future")
	}
	if st.Pause.ResumeToken == "" && e.From != capsule.Waiting && !e.CapsuleDeadline.IsZero() && e.Deadline == nil {
		if dl := st.DeadlineIn(e.CapsuleDeadline); !now.Before(dl) {
			hint := "its deadline passed at " + dl.UTC().Format(time.RFC3339)
			if e.From == capsule.WaitingForOperator {
				hint += ": it halts deadline_exceeded"
			} else {
				hint += ": give it a new one with --deadline TIME or --extend DURATION"
			}
			return false, refused(e, cp, hint)
		}
	}
	if st.Pause.ResumeToken == "" {
		pause := *st.Pause          // shared with Apply's input
		pause.ResumeToken = e.Token // else a resume in flight: finish that one
		st.Pause = &pause
		if e.From == capsule.WaitingForOperator {
			acceptOver(cp, e.By, now)
		}
		// On the record once per resume: a request that finishes a
		// resume in flight adds nothing to the log.
		if e.Answer != nil && strings.TrimSpace(e.Answer.Text) != "" {
			st.RecordAnswer(*e.Answer)
		}
	}
	if e.Answer != nil && strings.TrimSpace(e.Answer.Text) != "" {
		a := *e.Answer
		st.OperatorAnswer = &a
	}
	if e.Tokens > 0 || e.Dollars > 0 || e.Deadline != nil {
		o := capsule.Overrides{}
		if st.Overrides != nil {
			o = *st.Overrides // shared with Apply's input
		}
		st.Overrides = &o
		if e.Tokens > 0 || e.Dollars > 0 {
			st.Overrides.Tokens = max(e.Tokens, st.Overrides.Tokens)
			st.Overrides.Dollars = max(e.Dollars, st.Overrides.Dollars)
			st.Warned = without(st.Warned, capsule.TriggerBudgetWarning)
		}
		if e.Deadline != nil {
			d := e.Deadline.UTC()
			st.Overrides.Deadline = &d
			st.Warned = without(st.Warned, capsule.TriggerDeadlineApproaching)
		}
	}
	return true, nil
}

// OperatorAcceptance starts the finding an operator's accept over a verdict
// other than APPROVED records.
const OperatorAcceptance = "operator accepted over "

// acceptOver records an operator's accept of the cycle under review, when
// its verdict is not APPROVED, as the operator's approval of the cycle's
// artifact: the capsule's final artifact is that of its last approved
// cycle (store.FinalArtifactRef), so chains go on with it, and the reviews
// say who accepted over what.
func acceptOver(cp *capsule.Checkpoint, by string, now time.Time) {
	st := &cp.State
	n := len(st.Reviews)
	if n == 0 {
		return
	}
	last := st.Reviews[n-1]
	if last.Verdict == capsule.Approved || last.Cycle != st.Cycle {
		return
	}
	if by == "" {
		by = "operator"
	}
	st.Reviews = append(st.Reviews, capsule.ReviewEntry{
		Cycle: st.Cycle, ReviewerID: OperatorReviewer + by, Verdict: capsule.Approved, At: now,
		Findings: []capsule.Finding{{Message: OperatorAcceptance + string(last.Verdict) + " of " + last.ReviewerID}},
	})
}

// AcceptedOver returns who accepted cp's artifact over the reviewer's
// verdict, and that verdict, when its last review is such an accept.
func AcceptedOver(cp *capsule.Checkpoint) (by string, verdict capsule.Verdict, ok bool) {
	n := len(cp.State.Reviews)
	if n < 2 {
		return "", "", false
	}
	last, prev := cp.State.Reviews[n-1], cp.State.Reviews[n-2]
	if last.Verdict != capsule.Approved || !strings.HasPrefix(last.ReviewerID, OperatorReviewer) || prev.Cycle != last.Cycle ||
		len(last.Findings) != 1 || !strings.HasPrefix(last.Findings[0].Message, OperatorAcceptance) {
		return "", "", false
	}
	return strings.TrimPrefix(last.ReviewerID, OperatorReviewer), prev.Verdict, true
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

func resume(cp *capsule.Checkpoint, e Resume) (bool, error) {
	st := &cp.State
	if e.At != nil {
		if Current(cp, e.At.Phase, e.At.Cycle) {
			return false, nil // resumed already
		}
		if !Resumable(cp, e.At.Phase, e.At.Cycle, e.Token) {
			return false, refuse(ErrStale, e, cp, "not paused here with this resume token")
		}
	} else if st.Pause == nil || st.Pause.ResumeToken != e.Token || e.Token == "" {
		return false, nil // the phase message finished this resume first
	}
	st.Status = capsule.InProgress
	st.Pause = nil
	st.WaitingFor = nil
	return true, nil
}

func pause(cp *capsule.Checkpoint, e Pause, now time.Time) (bool, error) {
	st := &cp.State
	switch st.Status {
	case capsule.InProgress:
		park(st, capsule.TriggerOperatorManual, e.Reason, e.By, now)
		return true, nil
	case capsule.Paused:
		if i, ok := st.ParkedBy(); ok && i.CallRuns {
			return false, refused(e, cp, i.PauseRefused)
		}
		if st.Pause != nil && !st.Pause.Trigger.Info().Operator && st.Pause.ResumeToken == "" {
			// Parked by sagad (it would resume by itself): the operator's
			// pause takes over, so only an operator resumes it.
			park(st, capsule.TriggerOperatorManual, e.Reason, e.By, now)
			return true, nil
		}
		return false, nil
	case capsule.WaitingForOperator:
		return false, refused(e, cp, "it already waits for a decision: decide or cancel")
	case capsule.Waiting:
		hint := capsule.TriggerDependencies.Info().PauseRefused
		if i, ok := st.ParkedBy(); ok && i.PauseRefused != "" {
			hint = i.PauseRefused
		}
		return false, refused(e, cp, hint)
	}
	return false, refused(e, cp, "")
}

func end(cp *capsule.Checkpoint, e End, now time.Time) (bool, *capsule.Transition, error) {
	st := &cp.State
	outcome := capsule.OutcomeCancelled
	switch e.State {
	case capsule.Cancelled:
	case capsule.Halted:
		outcome = capsule.OutcomeHalted
		if e.Detail == "" && e.IfDeadlinePassed == nil {
			return false, nil, refuse(ErrInvalid, e, cp, "a halt needs a reason")
		}
	default:
		return false, nil, refuse(ErrInvalid, e, cp, "end in "+string(e.State))
	}
	if st.Status == capsule.Cancelled && e.State == capsule.Cancelled {
		return false, nil, nil
	}
	if e.IfPausedAt != nil && !(st.Status == capsule.Paused && st.Pause != nil && st.Pause.At.Equal(*e.IfPausedAt) && st.AwaitingCycle > 0) {
		return false, nil, refused(e, cp, "it changed meanwhile")
	}
	if e.IfWaitingSince != nil && !(st.Status == capsule.Waiting && st.Pause != nil && st.Pause.At.Equal(*e.IfWaitingSince)) {
		return false, nil, refused(e, cp, "it changed meanwhile")
	}
	if st.Status.Terminal() {
		return false, nil, refused(e, cp, "it has ended")
	}
	if e.IfDeadlinePassed != nil {
		parked := (st.Status == capsule.Paused || st.Status == capsule.Waiting || st.Status == capsule.WaitingForOperator) && st.Pause != nil
		if !parked {
			return false, nil, refused(e, cp, "it is no longer parked")
		}
		if now.Before(st.DeadlineIn(*e.IfDeadlinePassed)) {
			return false, nil, refused(e, cp, "its deadline has not passed")
		}
		if e.Detail == "" {
			e.Detail = cp.DeadlineHalt(st.Phase, *e.IfDeadlinePassed).String()
		}
	}
	st.Status = e.State
	if e.State == capsule.Halted {
		st.HaltReason = e.Detail
	}
	detail := e.Detail
	if c := st.Execution; c != nil && now.Before(c.ExpiresAt) {
		// An agent's call has no cancel on the wire: its holder stops
		// reading when it sees the capsule ended. History says so.
		detail += fmt.Sprintf(" (the call in flight at %s cycle %d is abandoned: sagad stops reading it)", st.Phase, c.Cycle)
	}
	st.Pause = nil
	st.Execution = nil
	st.WaitingFor = nil
	st.AgentQueries = nil
	st.LocksHeld = []string{}
	tr := capsule.Transition{Phase: st.Phase, PhaseName: st.Phase.String(), Cycle: st.Cycle, Outcome: outcome, Detail: detail, At: now}
	return true, record(cp, tr), nil
}

// OperatorReviewer prefixes the reviewer id of an operator's revision.
const OperatorReviewer = capsule.OperatorReviewerPrefix

// RevisionPrefix starts the finding an operator's revision records.
const RevisionPrefix = "operator revision: "

// RejectionPrefix starts the finding an operator's rejection records.
const RejectionPrefix = "operator rejection: "

func revise(cp *capsule.Checkpoint, e Revise, now time.Time) (bool, *capsule.Transition, error) {
	st := &cp.State
	if st.Status != capsule.WaitingForOperator {
		if RevisedBy(cp) != "" {
			return false, nil, nil // recorded: the caller finishes its effects
		}
		return false, nil, refused(e, cp, "only a capsule waiting_for_operator can be decided")
	}
	if st.Pause != nil && st.Pause.ResumeToken != "" {
		return false, nil, refused(e, cp, "an accept is already under way")
	}
	if e.CycleLimit < 1 {
		return false, nil, refuse(ErrInvalid, e, cp, "no cycle limit")
	}
	finding := capsule.Finding{Message: RevisionPrefix + e.Rationale, Source: capsule.FindingSourceOperator}
	cycle := st.Cycle
	// The rationale is also the person's answer, which the revision's
	// executor calls carry as operator_answer.
	st.OperatorAnswer = &capsule.OperatorAnswer{Text: e.Rationale, By: e.By, At: now}
	tr := capsule.Transition{Phase: st.Phase, PhaseName: st.Phase.String(), Cycle: cycle, At: now}
	st.Pause = nil
	st.Reviews = append(st.Reviews, capsule.ReviewEntry{
		Cycle: cycle, ReviewerID: OperatorReviewer + e.By, Verdict: capsule.ChangesRequested, Findings: []capsule.Finding{finding}, At: now,
	})
	if cycle >= e.CycleLimit {
		reason := capsule.MaxCyclesExceeded(e.CycleLimit).String()
		tr.Outcome, tr.Detail = capsule.OutcomeHalted, reason
		st.Status, st.HaltReason = capsule.Halted, reason
	} else {
		tr.Outcome, tr.Detail = capsule.OutcomeLoopedBack, "operator revise: "+e.Rationale
		st.Status = capsule.InProgress
		st.Phase, st.PhaseName, st.Cycle = capsule.Execution, capsule.Execution.String(), cycle+1
	}
	return true, record(cp, tr), nil
}

func reject(cp *capsule.Checkpoint, e Reject, now time.Time) (bool, *capsule.Transition, error) {
	st := &cp.State
	// A composition step held at its gate is decided like a verdict at
	// the operator gate: rejected, it halts operator_rejected.
	gated := st.Status == capsule.Paused && st.Pause != nil && st.Pause.Trigger == capsule.TriggerCompositionGate
	if st.Status != capsule.WaitingForOperator && !gated {
		if st.Status == capsule.Halted && st.HaltReason == capsule.OperatorRejected().String() {
			return false, nil, nil // recorded: the caller finishes its effects
		}
		return false, nil, refused(e, cp, "only a capsule waiting_for_operator (or at its composition gate) can be decided")
	}
	if st.Pause != nil && st.Pause.ResumeToken != "" {
		return false, nil, refused(e, cp, "an accept is already under way")
	}
	reason := capsule.OperatorRejected().String()
	finding := capsule.Finding{Message: RejectionPrefix + e.Rationale}
	st.Pause = nil
	st.Reviews = append(st.Reviews, capsule.ReviewEntry{
		Cycle: st.Cycle, ReviewerID: OperatorReviewer + e.By, Verdict: capsule.Rejected, Findings: []capsule.Finding{finding}, At: now,
	})
	st.Status, st.HaltReason = capsule.Halted, reason
	st.Findings = []capsule.Finding{finding}
	tr := capsule.Transition{Phase: st.Phase, PhaseName: st.Phase.String(), Cycle: st.Cycle, Outcome: capsule.OutcomeHalted, Detail: reason, At: now}
	return true, record(cp, tr), nil
}

// RevisedBy returns who revised the capsule if its last transition is an
// operator revision (a loop back, or the halt of Rule 12), else "".
func RevisedBy(cp *capsule.Checkpoint) string {
	n, r := len(cp.History), len(cp.State.Reviews)
	if n == 0 || r == 0 {
		return ""
	}
	tr, rv := cp.History[n-1], cp.State.Reviews[r-1]
	if tr.Phase != capsule.Handoff || rv.Cycle != tr.Cycle || !strings.HasPrefix(rv.ReviewerID, OperatorReviewer) ||
		(tr.Outcome != capsule.OutcomeLoopedBack && tr.Outcome != capsule.OutcomeHalted) {
		return ""
	}
	return strings.TrimPrefix(rv.ReviewerID, OperatorReviewer)
}

func recordResult(cp *capsule.Checkpoint, e RecordResult) (bool, error) {
	st := &cp.State
	if e.Result.Cycle != e.Cycle {
		return false, refuse(ErrInvalid, e, cp, "result of another cycle")
	}
	if st.Status.Terminal() || st.AwaitingCycle != e.Cycle || (st.Result != nil && st.Result.Cycle == e.Cycle) {
		return false, nil
	}
	// Constant time: how much of a guess matches must not show. A
	// checkpoint without a hash (written before tokens existed) takes no
	// completion: its capsule ends at its external timeout, or an
	// operator's forced resume asks the executor again.
	if st.AwaitingTokenHash == "" || subtle.ConstantTimeCompare([]byte(st.AwaitingTokenHash), []byte(e.TokenHash)) != 1 {
		return false, refuse(ErrUnauthenticated, e, cp, fmt.Sprintf("result of cycle %d", e.Cycle))
	}
	res := e.Result
	st.Result = &res
	return true, nil
}

// estimatedDetail is the history's note on a call whose tokens sagad
// estimated (an agent that reported no usage), "" otherwise.
func estimatedDetail(r *Record) string {
	var u capsule.Usage
	switch {
	case r == nil:
		return ""
	case r.Result != nil:
		u = r.Result.Usage
	case r.Review != nil:
		u = r.Review.Usage
	}
	if !u.Estimated {
		return ""
	}
	return fmt.Sprintf("usage: %d tokens (estimated), $%.4f", u.Tokens, u.Dollars)
}
