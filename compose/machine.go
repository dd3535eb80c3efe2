package compose

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/store"
)

// The composition machine. A run's record changes only by [Transition]: a
// function of the record and one typed [Event] (what happened to the run)
// that returns the new record and the events to publish on saga.events,
// and writes nothing. [apply] is the one compare-and-set loop that reads
// the record, runs the transition and writes the result; what has to be
// done next (publish steps recorded unpublished, send the run's outcome) is
// read from the record itself ([EffectsOf]), so whoever reads the record
// after a crash does what is left.

// Kind is what happened to a composition run: a [Event]'s kind.
type Kind string

// Composition event kinds. Round started and loop ended are not among
// them: the machine decides them itself, when the last step of a loop's
// round ended (step_ended) or a person decided on its verifier
// (gate_decided), and publishes composition_round_started and
// composition_loop_ended.
const (
	// KindStarted: a new run was recorded (Event.Record).
	KindStarted Kind = "started"
	// KindStepsPublished: sagad published steps the record held
	// unpublished (Event.Published: each step's capsule id); in a
	// cancelled run they end cancelled instead.
	KindStepsPublished Kind = "steps_published"
	// KindPublishDeferred: the producer's intake refused steps
	// (Event.Steps, Event.Error): sagad publishes them as room appears.
	KindPublishDeferred Kind = "publish_deferred"
	// KindStepEnded: a step's capsule ended (Event.Step, CapsuleID,
	// CapsuleRun, End).
	KindStepEnded Kind = "step_ended"
	// KindGateDecided: a person decided on the verifier (Event.Step) of a
	// loop stopped for no_progress (Event.Accept, By, Reason).
	KindGateDecided Kind = "gate_decided"
	// KindPaused and KindResumed: a person paused or resumed the run.
	KindPaused  Kind = "paused"
	KindResumed Kind = "resumed"
	// KindCancelled: a person cancelled the run.
	KindCancelled Kind = "cancelled"
	// KindReplayed: a person replayed an ended run's failed steps
	// (Event.Runs: each step's capsule run whose end is past).
	KindReplayed Kind = "replayed"
	// KindEnded: the run's one outcome was sent.
	KindEnded Kind = "ended"
)

// Kinds are every [Kind].
var Kinds = []Kind{KindStarted, KindStepsPublished, KindPublishDeferred, KindStepEnded, KindGateDecided,
	KindPaused, KindResumed, KindCancelled, KindReplayed, KindEnded}

// EventStepStarted: a step's capsule was published on its producer's
// intake (a run's first steps, a held step released, a loop's round), so
// its run starts.
const EventStepStarted capsule.EventKind = "composition_step_started"

// Event is one thing that happened to a composition run; which fields
// count depends on Kind.
type Event struct {
	Kind Kind
	At   time.Time
	// By and Reason: who paused, resumed, cancelled, replayed or decided,
	// and why.
	By, Reason string
	// Record is the new run (started).
	Record *Record
	// Published maps each step published to the capsule id it was
	// published under (steps_published).
	Published map[int]string
	// Steps are the steps the intake refused, and Error its refusal
	// (publish_deferred).
	Steps []int
	Error string
	// Step is the step that ended (step_ended) or the verifier decided on
	// (gate_decided); CapsuleID, CapsuleRun and End are how its capsule
	// ended.
	Step       int
	CapsuleID  string
	CapsuleRun int
	End        StepEnd
	// Accept: the person accepted (gate_decided).
	Accept bool
	// Runs maps each replayed step to its capsule's run that ended
	// (replayed).
	Runs map[int]int
}

// Inputs are what a transition reads besides the record and the event:
// facts that do not change once true (an ended verifier's verdict, an
// ended step's artifacts, the run's document under its digest), read only
// when a loop's round ends or held steps are released.
type Inputs struct {
	Verdict verdictLookup
	Doc     func(*Record) (*Doc, error)
}

// Result is what a transition made of the record.
type Result struct {
	// Record is the new record (rec itself is left as it was).
	Record *Record
	// Changed: Record differs from rec and must be written.
	Changed bool
	// Events go to saga.events once the record is written, each stamped
	// with the event's time; some are sent again when a transition finds
	// its work done already (a crash may have come before they were).
	Events []capsule.Event
}

// Transition applies ev to rec (nil before started). It refuses an event
// the run cannot take (a control of an ended run, a decision on a loop
// not waiting) with a documented error, and changes nothing on a repeat.
func Transition(ctx context.Context, rec *Record, ev Event, in Inputs) (Result, error) {
	if ev.Kind == KindStarted {
		if rec != nil || ev.Record == nil {
			return Result{}, fmt.Errorf("%w: started on a recorded run", ErrBadEvent)
		}
		r, err := cloneRecord(ev.Record)
		if err != nil {
			return Result{}, err
		}
		return Result{Record: r, Changed: true, Events: []capsule.Event{startedEvent(r, ev.At)}}, nil
	}
	if rec == nil {
		return Result{}, fmt.Errorf("%w: %s before the run was recorded", ErrBadEvent, ev.Kind)
	}
	r, err := cloneRecord(rec)
	if err != nil {
		return Result{}, err
	}
	return transition(ctx, r, ev, in)
}

// transition is [Transition] on a record of the caller's own, which it
// changes in place: [apply]'s, read afresh for each attempt, is copied
// no further (a 256-step record is some 60 kB of JSON).
func transition(ctx context.Context, r *Record, ev Event, in Inputs) (Result, error) {
	var (
		changed bool
		evs     []capsule.Event
		err     error
	)
	switch ev.Kind {
	case KindStepsPublished:
		changed, evs = stepsPublished(r, ev)
	case KindPublishDeferred:
		changed = publishDeferred(r, ev)
	case KindStepEnded:
		changed, evs, err = stepEnded(ctx, r, ev, in)
	case KindGateDecided:
		changed, evs, err = gateDecided(ctx, r, ev, in)
	case KindPaused, KindResumed:
		changed, err = paused(r, ev)
	case KindCancelled:
		changed, err = cancelled(r, ev)
	case KindReplayed:
		changed, err = replayed(r, ev)
	case KindEnded:
		changed = !r.OutcomeSent
		r.OutcomeSent = true
	default:
		return Result{}, fmt.Errorf("%w: kind %q", ErrBadEvent, ev.Kind)
	}
	if err != nil {
		return Result{}, err
	}
	for i := range evs {
		evs[i].At = ev.At
	}
	return Result{Record: r, Changed: changed, Events: evs}, nil
}

// ErrBadEvent refuses an event the machine has no transition for.
var ErrBadEvent = errors.New("composition event not applicable")

// cloneRecord is a deep copy of rec, so a transition never changes what
// its caller holds.
func cloneRecord(rec *Record) (*Record, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Effects are what a record says is left to do.
type Effects struct {
	// Publish: steps are recorded unpublished (a loop's new round, steps
	// a loop released, steps the intake refused) and the run is not held
	// by a person's pause: publish them (in a cancelled run, end them).
	Publish bool
	// Outcome: every step ended and the run's one outcome is not known
	// sent.
	Outcome bool
}

// EffectsOf reads what is left to do from rec.
func EffectsOf(rec *Record) Effects {
	return Effects{
		Publish: len(rec.Unpublished) > 0 && rec.PublishError != publishingNow &&
			(rec.State != StatePaused || waitingForPerson(rec)),
		Outcome: rec.AllEnded() && rec.State != "" && rec.State != StatePaused && !rec.OutcomeSent,
	}
}

// runKey names one run's record.
type runKey struct {
	id, producer string
	run          int
}

func keyOf(rec *Record) runKey { return runKey{rec.CompositionID, rec.Producer, rec.RunOf()} }

// apply is the composition machine's one compare-and-set loop: it reads
// run k's record, applies ev ([Transition]), writes what changed (again on
// a concurrent write, under sagad's one retry policy), then publishes the
// transition's events. It returns the record as stored.
func apply(ctx context.Context, st *store.Store, k runKey, ev Event, in Inputs) (*Record, error) {
	var evs []capsule.Event
	if ev.Kind == KindStarted {
		return nil, fmt.Errorf("%w: a run is started by creating its record", ErrBadEvent)
	}
	rec, err := updateRecord(ctx, st, k, func(r *Record) error {
		res, err := transition(ctx, r, ev, in)
		if err != nil {
			return err
		}
		evs = res.Events
		if !res.Changed {
			return store.ErrNoChange
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := st.PublishEvents(ctx, evs...); err != nil {
		return rec, err
	}
	return rec, nil
}

// inputs are the transition inputs read from st: verdicts from
// checkpoints, the document once per transition.
func inputs(ctx context.Context, st *store.Store) Inputs {
	return Inputs{Verdict: checkpointVerdict(st), Doc: docLoader(ctx, st)}
}

// stepsPublished records the steps ev published, and ends cancelled the
// unpublished steps of a cancelled run.
func stepsPublished(r *Record, ev Event) (bool, []capsule.Event) {
	if len(r.Unpublished) == 0 {
		return false, nil
	}
	var evs []capsule.Event
	r.Unpublished = slices.DeleteFunc(r.Unpublished, func(i int) bool {
		if r.State == StateCancelled {
			endCancelled(r, i)
			return true
		}
		if id, ok := ev.Published[i]; ok && id == r.Steps[i] {
			evs = append(evs, stepStartedEvent(r, i))
			return true
		}
		return false
	})
	if len(r.Unpublished) == 0 {
		r.PublishError = ""
	}
	endIfDone(r, ev.At)
	return true, evs
}

// publishDeferred records the steps the intake refused as unpublished,
// with the refusal. Without steps it only says why the steps recorded
// unpublished with the run wait: it replaces the claim of the request
// publishing them (publishingNow), and changes nothing once that claim
// was replaced (the republisher took them over, or they were published).
func publishDeferred(r *Record, ev Event) bool {
	if len(ev.Steps) == 0 && (r.PublishError != publishingNow || len(r.Unpublished) == 0) {
		return false
	}
	for _, i := range ev.Steps {
		if i >= 0 && i < len(r.Steps) && !slices.Contains(r.Unpublished, i) {
			r.Unpublished = append(r.Unpublished, i)
		}
	}
	r.PublishError = capsule.Truncate(ev.Error, maxPublishError)
	return true
}

// stepEnded records how a step's capsule ended, unless it is no step of
// the run's (not assigned by sagad, or a loop's past round), its end is
// recorded, or it is the end of a capsule run replayed since; the step's
// event is sent again for an end recorded before. The last end of a
// loop's round judges the round ([roundEnded]).
func stepEnded(ctx context.Context, r *Record, ev Event, in Inputs) (bool, []capsule.Event, error) {
	step := ev.Step
	round, recorded := roundOf(r, step, ev.CapsuleID)
	if step < 0 || step >= len(r.Steps) || r.Steps[step] != ev.CapsuleID {
		if recorded {
			return false, []capsule.Event{stepEndedEvent(r, step, ev.CapsuleID, round, ev.End)}, nil
		}
		return false, nil, nil
	}
	ensureEnded(r)
	if r.Ended[step].State != "" || ev.CapsuleRun <= r.Ended[step].After {
		if r.Ended[step].State != "" {
			return false, []capsule.Event{stepEndedEvent(r, step, ev.CapsuleID, round, r.Ended[step])}, nil
		}
		return false, nil, nil
	}
	r.Ended[step] = ev.End
	evs := []capsule.Event{stepEndedEvent(r, step, ev.CapsuleID, round, ev.End)}
	if k := loopOf(r, step); k >= 0 {
		loopEvs, err := roundEnded(ctx, r, k, ev.At, in.Verdict, func() (*Doc, error) { return in.Doc(r) })
		if err != nil {
			return false, nil, err
		}
		evs = append(evs, loopEvs...)
	}
	endIfDone(r, ev.At)
	return true, evs, nil
}

// gateDecided decides on the loop whose verifier is ev.Step, stopped for
// no_progress (see decideLoop). The same answer again changes nothing.
func gateDecided(ctx context.Context, r *Record, ev Event, in Inputs) (bool, []capsule.Event, error) {
	k := slices.IndexFunc(r.Loops, func(l LoopRun) bool { return l.Verifier() == ev.Step })
	if k < 0 {
		return false, nil, fmt.Errorf("%w: step %s verifies no loop", ErrNotGated, stepName(r, ev.Step))
	}
	l := &r.Loops[k]
	if (ev.Accept && l.State == LoopAccepted) || (!ev.Accept && l.State == LoopRejected) {
		return false, nil, nil
	}
	if l.State != LoopNoProgress {
		return false, nil, fmt.Errorf("%w: the loop of verifier %s is %s", ErrNotGated, stepName(r, l.Verifier()), l.StateOf())
	}
	at := ev.At
	l.By, l.Reason, l.At = ev.By, ev.Reason, &at
	if ev.Accept {
		l.State = LoopAccepted
		if err := release(ctx, r, in.Verdict, func() (*Doc, error) { return in.Doc(r) }); err != nil {
			return false, nil, err
		}
	} else {
		l.State = LoopRejected
		fail(r, k)
	}
	if !waitingForPerson(r) && r.State == StatePaused && r.Reason == ReasonNoProgress {
		r.State, r.By, r.Reason = "", ev.By, ev.Reason
	}
	endIfDone(r, ev.At)
	return true, []capsule.Event{loopEvent(r, k, EventLoopEnded, fmt.Sprintf("%s by %s: %s", l.State, ev.By, ev.Reason))}, nil
}

// paused records a person's pause or resume; refused once every step
// ended, once cancelled, and while a loop waits for a decision.
func paused(r *Record, ev Event) (bool, error) {
	state := StatePaused
	if ev.Kind == KindResumed {
		state = StateRunning
	}
	if runEnded(r) || r.State == StateCancelled {
		return false, fmt.Errorf("%w: composition %s run %d is %s", ErrEnded, r.CompositionID, r.RunOf(), r.StateOf())
	}
	if r.StateOf() == state {
		return false, nil
	}
	if waitingForPerson(r) {
		return false, fmt.Errorf("%w: composition %s run %d: a loop stopped for no_progress: decide on its verifier", ErrLoopWaits, r.CompositionID, r.RunOf())
	}
	r.State, r.By, r.Reason = state, ev.By, ev.Reason
	if state == StateRunning {
		r.State = ""
	}
	return true, nil
}

// cancelled records a person's cancel; the steps held or not yet
// published end cancelled here (nobody else would end them). Refused once
// the run ended.
func cancelled(r *Record, ev Event) (bool, error) {
	if runEnded(r) {
		return false, fmt.Errorf("%w: composition %s run %d is %s", ErrEnded, r.CompositionID, r.RunOf(), r.StateOf())
	}
	if r.State == StateCancelled {
		return false, nil
	}
	r.State, r.By, r.Reason = StateCancelled, ev.By, ev.Reason
	for _, i := range slices.Concat(r.Held, r.Unpublished) {
		endCancelled(r, i)
	}
	r.Held, r.Unpublished = nil, nil
	return true, nil
}

// replayed forgets the ends of the steps ev replays (remembering which
// capsule run ended) and counts the replay. Refused while the run runs and
// when it completed.
func replayed(r *Record, ev Event) (bool, error) {
	if !r.AllEnded() {
		return false, fmt.Errorf("%w: composition %s run %d is %s: replay a run once it ended", ErrNotEnded, r.CompositionID, r.RunOf(), r.StateOf())
	}
	if r.StateOf() == StateCompleted || len(ev.Runs) == 0 {
		return false, fmt.Errorf("%w: composition %s run %d completed: nothing to replay", ErrEnded, r.CompositionID, r.RunOf())
	}
	for i, run := range ev.Runs {
		if i >= 0 && i < len(r.Ended) {
			r.Ended[i] = StepEnd{After: run}
		}
	}
	r.State, r.OutcomeSent, r.EndedAt, r.By, r.Reason = "", false, nil, ev.By, ev.Reason
	r.Replays++
	return true, nil
}

// cancelledUnpublished reports whether step i of r ended cancelled
// without being known published (held, or recorded unpublished, when the
// run was cancelled): its capsule may still have been received.
func cancelledUnpublished(r *Record, i int) bool {
	return i < len(r.Ended) && r.Ended[i].State == string(capsule.Cancelled) && r.Ended[i].HaltReason == compositionCancelled
}

// compositionCancelled is the halt reason of a step a cancel ended
// before it was published.
const compositionCancelled = "composition cancelled"

// stepIndex is p as an event's step index.
func stepIndex(p int) *int { return &p }

// startedEvent is a new run's composition_started.
func startedEvent(r *Record, at time.Time) capsule.Event {
	key := EventKey(r.CompositionID, r.Producer)
	return capsule.Event{ID: fmt.Sprintf("%s.run%d.started", key, r.RunOf()), Kind: EventStarted, Key: key, At: at,
		Detail: fmt.Sprintf("run %d: %d steps", r.RunOf(), len(r.Steps))}
}

// stepStartedEvent is step i's composition_step_started, once per step,
// loop round and replay.
func stepStartedEvent(r *Record, i int) capsule.Event {
	key := EventKey(r.CompositionID, r.Producer)
	round := 0
	if k := loopOf(r, i); k >= 0 {
		round = r.Loops[k].Round
	}
	id := fmt.Sprintf("%s.run%d%s.step%d.started", key, r.RunOf(), replayTag(r.Replays), i)
	detail := fmt.Sprintf("run %d step %s: published", r.RunOf(), stepName(r, i))
	if round > 1 {
		id = fmt.Sprintf("%s.run%d%s.step%d.loopround%d.started", key, r.RunOf(), replayTag(r.Replays), i, round)
		detail += fmt.Sprintf(" (loop round %d)", round)
	} else {
		round = 0
	}
	return capsule.Event{ID: id, Kind: EventStepStarted, CapsuleID: r.Steps[i], Key: key, Detail: detail,
		Step: stepIndex(i), StepName: stepName(r, i), Round: round}
}

// stepEndedEvent is step's composition_step_ended for capsule id, in its
// loop's round (0: no loop), with its result.
func stepEndedEvent(r *Record, step int, id string, round int, end StepEnd) capsule.Event {
	key := EventKey(r.CompositionID, r.Producer)
	evID := fmt.Sprintf("%s.run%d%s.step%d.ended", key, r.RunOf(), replayTag(r.Replays), step)
	detail := fmt.Sprintf("run %d step %s: %s", r.RunOf(), stepName(r, step), end.State)
	if round > 1 {
		// Each loop round's step ends once.
		evID = fmt.Sprintf("%s.run%d%s.step%d.loopround%d.ended", key, r.RunOf(), replayTag(r.Replays), step, round)
		detail += fmt.Sprintf(" (loop round %d)", round)
	} else {
		round = 0
	}
	return capsule.Event{ID: evID, Kind: EventStepEnded, CapsuleID: id, Key: key, Detail: detail,
		Step: stepIndex(step), StepName: stepName(r, step), Round: round, Artifact: end.Artifact}
}
