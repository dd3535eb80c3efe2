package compose

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/runner"
	"github.com/sagad/sagad/store"
)

// Composition events on SAGA_EVENTS (subject saga.events.<EventKey>).
const (
	EventStarted   capsule.EventKind = "composition_started"
	EventStepEnded capsule.EventKind = "composition_step_ended"
	EventEnded     capsule.EventKind = "composition_ended"
)

// OutcomePrefix is where each run's one outcome goes:
// saga.outcome.composition.<composition_id>.
const OutcomePrefix = store.OutcomePrefix + "composition."

// RunnerConsumer is the durable consumer of SAGA_OUTCOMES that records
// the ends of composition steps.
const RunnerConsumer = "sagad-compositions"

// EventKey is the events key of producer's composition id: its events are
// on saga.events.composition.<producer or ->.<id>.
func EventKey(id, producer string) string {
	if producer == "" {
		producer = "-"
	}
	return "composition." + producer + "." + id
}

// OutcomeMsgID de-duplicates a run's outcome message: one per run and
// replay round.
func OutcomeMsgID(id, producer string, run, round int) string {
	return EventKey(id, producer) + ".run" + strconv.Itoa(run) + replayTag(round) + ".outcome"
}

// replayTag names a run's replay in ids (".round<n>", as it always was);
// 0 (no replay) adds nothing.
func replayTag(replays int) string {
	if replays == 0 {
		return ""
	}
	return ".round" + strconv.Itoa(replays)
}

// Outcome is the body of a run's outcome message, and what `sagactl
// composition status` shows: the manifest of the run.
type Outcome struct {
	CompositionID string `json:"composition_id"`
	Producer      string `json:"producer,omitempty"`
	Run           int    `json:"run"`
	Round         int    `json:"round,omitempty"`
	State         string `json:"state"`
	// Reason says why a paused run waits: no_progress while a loop waits
	// for a person's decision.
	Reason  string        `json:"reason,omitempty"`
	Summary Summary       `json:"summary"`
	Steps   []StepOutcome `json:"steps"`
	// Loops are the run's verification loops.
	Loops []LoopOutcome `json:"loops,omitempty"`
	// Publishing says, while the producer's intake has no room for some
	// of the run's steps, that sagad publishes them itself as room
	// appears (those steps show state unpublished), and the intake's
	// refusal. Absent once every step was published.
	Publishing string `json:"publishing,omitempty"`
	// Received counts the steps sagad has received (each has a
	// checkpoint, ended or not) of this run's current round: what
	// sagactl compose shows as its progress. Set by status only, not on
	// the outcome message.
	Received *int `json:"received,omitempty"`
}

// LoopOutcome is one verification loop of a run.
type LoopOutcome struct {
	// Verifier and Steps name the loop's steps.
	Verifier  string   `json:"verifier"`
	Steps     []string `json:"steps"`
	MaxRounds int      `json:"max_rounds"`
	// Round is the round running or last run, from 1.
	Round int `json:"round"`
	// State is running, passed, failed (max_rounds), no_progress (waits
	// for a person), accepted or rejected (by By, for Reason).
	State  string         `json:"state"`
	By     string         `json:"by,omitempty"`
	Reason string         `json:"reason,omitempty"`
	Rounds []RoundOutcome `json:"rounds"`
}

// RoundOutcome is one round of a loop: its capsules, aligned with the
// loop's Steps then its verifier, and what the verifier said once the
// round ended.
type RoundOutcome struct {
	Round      int      `json:"round"`
	CapsuleIDs []string `json:"capsule_ids"`
	Ended      bool     `json:"ended"`
	Passed     bool     `json:"passed"`
	Findings   int      `json:"findings"`
	// Spend is what the round's steps spent, once it ended.
	Spend *Spend `json:"spend,omitempty"`
}

// Summary counts a run's steps; ExitCode is the orchestrator contract's:
// 0 all passed, 1 failed (none passed), 12 partial.
type Summary struct {
	Total    int `json:"total"`
	Passed   int `json:"passed"`
	Failed   int `json:"failed"`
	ExitCode int `json:"exit_code"`
}

// StepOutcome is one step of a run's manifest. ExitCode is 0 for a
// completed step, 1 for one that halted or was cancelled, absent while the
// step runs.
type StepOutcome struct {
	Name       string   `json:"name"`
	CapsuleID  string   `json:"capsule_id"`
	State      string   `json:"state"`
	ExitCode   *int     `json:"exit_code,omitempty"`
	Artifact   string   `json:"artifact,omitempty"`
	HaltReason string   `json:"halt_reason,omitempty"`
	Spend      *Spend   `json:"spend,omitempty"`
	Needs      []string `json:"needs,omitempty"`
}

// Spend is what a step spent.
type Spend struct {
	Tokens  int64   `json:"tokens"`
	Dollars float64 `json:"dollars"`
}

// ExitCodeOf is the orchestrator contract's exit code of a run in state.
func ExitCodeOf(state string) int {
	switch state {
	case StateCompleted:
		return 0
	case StatePartial:
		return 12
	case StateRunning, StatePaused:
		return 0
	}
	return 1
}

// Manifest is rec's run as its outcome tells it; a step not ended yet
// shows state running.
func Manifest(rec *Record) Outcome {
	o := Outcome{CompositionID: rec.CompositionID, Producer: rec.Producer, Run: rec.RunOf(), Round: rec.Replays, State: rec.StateOf(),
		Steps: make([]StepOutcome, len(rec.Steps))}
	for i, id := range rec.Steps {
		s := StepOutcome{Name: ChainStepName(i), CapsuleID: id, State: StateRunning}
		if i < len(rec.Names) {
			s.Name = rec.Names[i]
		}
		s.Needs = needsOf(rec, i)
		if i < len(rec.Ended) && rec.Ended[i].State != "" {
			e := rec.Ended[i]
			code := 1
			if e.State == string(capsule.Completed) {
				code = 0
				o.Summary.Passed++
			} else {
				o.Summary.Failed++
			}
			s.State, s.ExitCode, s.Artifact, s.HaltReason = e.State, &code, e.Artifact, e.HaltReason
			s.Spend = &Spend{Tokens: e.Tokens, Dollars: e.Dollars}
		}
		o.Steps[i] = s
	}
	for _, j := range rec.Held {
		o.Steps[j].State = StepHeld
	}
	if rec.PublishError != "" && len(rec.Unpublished) > 0 {
		for _, j := range rec.Unpublished {
			o.Steps[j].State = StepUnpublished
		}
		o.Publishing = fmt.Sprintf("%d steps wait to be published; sagad publishes them itself as room appears (%s)",
			len(rec.Unpublished), rec.PublishError)
		if rec.PublishError == publishingNow {
			o.Publishing = fmt.Sprintf("%d steps wait to be published (%s); sagad publishes them itself if it stops", len(rec.Unpublished), publishingNow)
		}
	}
	if o.State == StatePaused {
		o.Reason = rec.Reason
	}
	o.Loops = loopOutcomes(rec)
	o.Summary.Total = len(rec.Steps)
	o.Summary.ExitCode = ExitCodeOf(o.State)
	return o
}

// loopOutcomes are rec's loops as a manifest shows them.
func loopOutcomes(rec *Record) []LoopOutcome {
	var out []LoopOutcome
	for _, l := range rec.Loops {
		lo := LoopOutcome{Verifier: stepName(rec, l.Verifier()), MaxRounds: l.MaxRounds, Round: l.Round,
			State: l.StateOf(), By: l.By, Reason: l.Reason}
		for _, i := range l.Steps[:len(l.Steps)-1] {
			lo.Steps = append(lo.Steps, stepName(rec, i))
		}
		for x, rd := range l.Rounds {
			ro := RoundOutcome{Round: x + 1, CapsuleIDs: rd.IDs, Ended: rd.Ended, Passed: rd.Passed, Findings: rd.Findings}
			if rd.Ended {
				ro.Spend = &Spend{Tokens: rd.Tokens, Dollars: rd.Dollars}
			}
			lo.Rounds = append(lo.Rounds, ro)
		}
		out = append(out, lo)
	}
	return out
}

// needsOf names the steps step i of rec needs: a chain document's step
// needs the one before it; a record without needs (written before they
// were kept) tells none.
func needsOf(rec *Record, i int) []string {
	name := func(j int) string {
		if j < len(rec.Names) {
			return rec.Names[j]
		}
		return ChainStepName(j)
	}
	if len(rec.Names) == 0 {
		if i == 0 {
			return nil
		}
		return []string{name(i - 1)}
	}
	if i >= len(rec.Needs) {
		return nil
	}
	var out []string
	for _, j := range rec.Needs[i] {
		if j >= 0 && j < len(rec.Steps) {
			out = append(out, name(j))
		}
	}
	return out
}

// RunnerConfig tunes the [Runner].
type RunnerConfig struct {
	// Logger logs each run's end, and the runner's naks and
	// terminations. Defaults to discarding.
	Logger *slog.Logger
	// Metrics counts the runner's terminations. Nil counts nothing.
	Metrics *metrics.Metrics
	// AckWait is how long an outcome may be handled before it is
	// delivered again. Defaults to 30s.
	AckWait time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

func (c RunnerConfig) withDefaults() RunnerConfig {
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Runner keeps each composition run's record from its steps' ends: it
// reads every capsule outcome (a durable consumer of SAGA_OUTCOMES, so no
// end is missed across a restart), records a step's end in its run's
// record with one compare-and-set, and when the last step ended sends the
// run's one outcome and its composition_ended event. Every step is
// idempotent, so a redelivered outcome or a crash between them changes
// nothing twice and loses nothing. Each message ends by
// [stepEndDelivery]: never redelivered for ever.
type Runner struct {
	st   *store.Store
	js   jetstream.JetStream
	cfg  RunnerConfig
	cons *runner.Consumer
	stop context.CancelFunc
	once sync.Once
}

// runnerWorkers handle step ends at once: one, as before the runner went
// through package runner. The ends of one run's steps all write its one
// record, so a second worker mostly loses compare-and-sets to the first
// (each loss a read, a transition and a write again) under a 256-step
// fan-out.
const runnerWorkers = 1

// StartRunner starts recording composition steps' ends until Stop.
func StartRunner(ctx context.Context, st *store.Store, cfg RunnerConfig) (*Runner, error) {
	if st == nil || st.Compositions == nil {
		return nil, errors.New("compose runner: a store with compositions is required")
	}
	cfg = cfg.withDefaults()
	r := &Runner{st: st, js: st.JetStream(), cfg: cfg}
	_, err := r.js.CreateOrUpdateConsumer(ctx, store.OutcomesStream, jetstream.ConsumerConfig{
		Durable:     RunnerConsumer,
		Description: "sagad: records the ends of composition steps",
		FilterSubjects: []string{
			store.OutcomeSubject(capsule.Completed), store.OutcomeSubject(capsule.Halted), store.OutcomeSubject(capsule.Cancelled),
		},
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxAckPending: 256,
	})
	if err != nil {
		return nil, fmt.Errorf("compose runner: consumer: %w", err)
	}
	// Handlers outlive ctx on purpose: Stop drains them.
	workCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	c, err := runner.Start(ctx, workCtx, r.js, store.OutcomesStream, RunnerConsumer,
		runner.Config{Workers: runnerWorkers, Logger: cfg.Logger, Metrics: cfg.Metrics}, r.handle)
	if err != nil {
		stop()
		return nil, fmt.Errorf("compose runner: consume: %w", err)
	}
	r.cons, r.stop = c, stop
	return r, nil
}

// Stop stops consuming once the step ends in hand are handled; again, it
// does nothing.
func (r *Runner) Stop() {
	r.once.Do(func() {
		r.cons.Stop()
		r.stop()
	})
}

func (r *Runner) handle(ctx context.Context, msg jetstream.Msg) runner.Delivery {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.AckWait)
	defer cancel()
	err := r.StepEnded(ctx, msg.Data(), msg.Headers().Get(store.HeaderKey))
	var delivered uint64 = 1
	if md, merr := msg.Metadata(); merr == nil {
		delivered = md.NumDelivered
	}
	return stepEndDelivery(err, delivered)
}

// MaxStepEndDeliveries bounds how often a step end sagad fails to record
// is delivered: past it the message is terminated
// (composition_step_unrecorded), the failure logged once at ERROR. With
// [stepEndRetryDelay]'s backoff that is about twenty minutes of trying,
// long past a JetStream leader election or a restart.
const MaxStepEndDeliveries = 40

// stepEndDelivery decides a step end's message that [Runner.StepEnded]
// handled with err on its delivered-th delivery: done; terminated at once
// (state_corrupt) when its run's record is no value sagad wrote, since
// reading it again gives the same bytes; else tried again after a delay
// that grows with the deliveries, until [MaxStepEndDeliveries].
func stepEndDelivery(err error, delivered uint64) runner.Delivery {
	switch {
	case err == nil:
		return runner.Ack()
	case errors.Is(err, corrupt.ErrCorrupt):
		return runner.Term(metrics.TermStateCorrupt, fmt.Errorf("composition step end not recorded, the run stays as its record is: %w", err))
	case delivered >= MaxStepEndDeliveries:
		return runner.Term(metrics.TermCompositionUnrecorded, fmt.Errorf("composition step end not recorded after %d deliveries: %w", delivered, err))
	}
	return runner.NakAfter(stepEndRetryDelay(delivered), fmt.Errorf("composition step end: %w", err))
}

// stepEndRetryDelay is 1s after the first delivery, doubling, at most 30s.
func stepEndRetryDelay(delivered uint64) time.Duration {
	if delivered >= 6 {
		return 30 * time.Second
	}
	return min(time.Second<<max(delivered, 1)>>1, 30*time.Second)
}

// StepOf reads the composition step an outcome's capsule bytes declare;
// ok is false for bytes that declare none (or are no capsule).
func StepOf(raw []byte) (c struct {
	CapsuleID string             `json:"capsule_id"`
	Chain     *capsule.ChainStep `json:"chain"`
}, ok bool) {
	if json.Unmarshal(raw, &c) != nil || c.Chain == nil || c.Chain.ID == "" || c.Chain.Step < 0 || c.Chain.Run < 0 {
		return c, false
	}
	return c, true
}

// StepEnded records the end of the capsule whose original bytes are raw
// and checkpoint key is key, if it is a composition's step; see [Runner].
func (r *Runner) StepEnded(ctx context.Context, raw []byte, key string) error {
	c, ok := StepOf(raw)
	if !ok || key == "" || key != c.CapsuleID {
		// Only the capsule that owns its id is a step: one kept under its
		// intake sequence (refused, or other bytes under a taken id)
		// declares a step it is not.
		return nil
	}
	cp, _, err := r.st.Checkpoints.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !cp.Terminal() || cp.CapsuleID == "" {
		return nil // replayed since: its new run's end will come
	}
	run := max(c.Chain.Run, 1)
	end := StepEnd{State: string(cp.State.Status), HaltReason: cp.State.HaltReason,
		Tokens: cp.State.BudgetUsed.Tokens, Dollars: cp.State.BudgetUsed.Dollars}
	if cp.State.Status == capsule.Completed && len(cp.State.ArtifactRefs) > 0 {
		end.Artifact = cp.State.ArtifactRefs[len(cp.State.ArtifactRefs)-1]
	}
	now := r.cfg.Now().UTC()
	ev := Event{Kind: KindStepEnded, At: now, Step: c.Chain.Step, CapsuleID: cp.CapsuleID, CapsuleRun: cp.RunNumber(), End: end}
	rec, err := apply(ctx, r.st, runKey{c.Chain.ID, cp.Producer, run}, ev, inputs(ctx, r.st))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	// A loop's past round's end, delivered again after a crash, publishes
	// what the record still holds unpublished.
	if rec, err = settle(ctx, r.st, rec, now); err != nil {
		return err
	}
	return r.finish(ctx, rec)
}

// roundOf finds capsule id as step's: ok, and its loop round (0 for a
// step in no loop).
func roundOf(rec *Record, step int, id string) (round int, ok bool) {
	if step < 0 || step >= len(rec.Steps) {
		return 0, false
	}
	k := loopOf(rec, step)
	if k < 0 {
		return 0, rec.Steps[step] == id
	}
	p := slices.Index(rec.Loops[k].Steps, step)
	for x, rd := range rec.Loops[k].Rounds {
		if rd.IDs[p] == id {
			return x + 1, true
		}
	}
	return 0, false
}

// docLoader reads a run's document once per step end, when a loop needs it.
func docLoader(ctx context.Context, st *store.Store) func(*Record) (*Doc, error) {
	var doc *Doc
	return func(rec *Record) (*Doc, error) {
		if doc != nil {
			return doc, nil
		}
		d, err := loadDoc(ctx, st, rec)
		doc = d
		return d, err
	}
}

// finish sends an ended run's outcome once (see [finishRun]).
func (r *Runner) finish(ctx context.Context, rec *Record) error {
	return finishRun(ctx, r.st, rec, r.cfg.Now().UTC(), r.cfg.Logger)
}

// finishRun sends an ended run's outcome once: a repeat before the record
// says it was sent is dropped by its Nats-Msg-Id. logger may be nil.
func finishRun(ctx context.Context, st *store.Store, rec *Record, now time.Time, logger *slog.Logger) error {
	if !EffectsOf(rec).Outcome {
		return nil
	}
	o := Manifest(rec)
	body, err := json.Marshal(o)
	if err != nil {
		return err
	}
	m := nats.NewMsg(OutcomePrefix + rec.CompositionID)
	m.Data = body
	m.Header.Set(jetstream.MsgIDHeader, OutcomeMsgID(rec.CompositionID, rec.Producer, rec.RunOf(), rec.Replays))
	m.Header.Set(store.HeaderState, o.State)
	m.Header.Set(store.HeaderRun, strconv.Itoa(o.Run))
	if _, err := st.JetStream().PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("composition %s outcome: %w", rec.CompositionID, err)
	}
	evKey := EventKey(rec.CompositionID, rec.Producer)
	at := now
	if rec.EndedAt != nil {
		at = *rec.EndedAt
	}
	if err := st.PublishEvent(ctx, capsule.Event{
		ID:   fmt.Sprintf("%s.run%d%s.ended", evKey, rec.RunOf(), replayTag(rec.Replays)),
		Kind: EventEnded, Key: evKey, At: at,
		Detail: fmt.Sprintf("run %d: %s, %d of %d passed, exit code %d", o.Run, o.State, o.Summary.Passed, o.Summary.Total, o.Summary.ExitCode),
	}); err != nil {
		return err
	}
	_, err = apply(ctx, st, keyOf(rec), Event{Kind: KindEnded, At: now}, inputs(ctx, st))
	if err == nil && logger != nil {
		logger.Info("composition ended", "composition_id", rec.CompositionID, "producer", rec.Producer, "run", o.Run,
			"state", o.State, "passed", o.Summary.Passed, "total", o.Summary.Total)
	}
	return err
}
