package compose

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/microreply"
	"github.com/sagad/sagad/rules"
	"github.com/sagad/sagad/store"
)

// Subject is the compose service's subject in sagad's own account; a
// producer's arrives on Subject + "." + producer (its account's import).
const Subject = "saga.compose"

// Service names and versions the micro service.
const (
	Name    = "sagad-compose"
	Version = "1.0.0"
)

// Step states in a [Reply].
const (
	// StepReceived: RECEPTION holds the step sagad published.
	StepReceived = "received"
	// StepPending: sagad published the step; RECEPTION had not received
	// it when the reply was sent.
	StepPending = "pending"
	// StepForeign: the step's capsule id holds a capsule other than the
	// one sagad published for this producer. Ids are random, so this
	// should never be seen; sagactl fails loudly if it is.
	StepForeign = "foreign"
	// StepHeld: the step comes after a verification loop: sagad publishes
	// it once the loop passed, on the loop's last round.
	StepHeld = "held"
	// StepRefused: RECEPTION halted the step (e.g. deadline_in_past); it
	// is kept under its intake sequence, and HaltReason says why.
	StepRefused = "refused"
	// StepUnpublished: the producer's intake had no room for the step
	// (its backlog full); sagad publishes it itself as room appears, and
	// composition status says so until it has.
	StepUnpublished = "unpublished"
)

// Error codes of an error reply.
const (
	CodeBadRequest = "bad_request"
	// CodeInvalid refuses a document whole, with per-step findings:
	// nothing was started.
	CodeInvalid  = "composition_invalid"
	CodeInternal = "internal"
)

// Step is one step in a [Reply].
type Step struct {
	Step      int    `json:"step"`
	Name      string `json:"name"`
	CapsuleID string `json:"capsule_id"`
	// Digest is the integrity digest of the capsule sagad published.
	Digest string `json:"digest"`
	// IntakeSeq is the intake sequence of sagad's publish (0 when the
	// intake recognised it as a duplicate of an earlier one).
	IntakeSeq uint64 `json:"intake_seq,omitempty"`
	State     string `json:"state"`
	// HaltReason is RECEPTION's, for a refused step.
	HaltReason string `json:"halt_reason,omitempty"`
}

// Reply answers a chain document.
type Reply struct {
	// CompositionID is the document's composition_id (or chain_id);
	// ChainID repeats it for clients of chain documents.
	CompositionID string `json:"composition_id"`
	ChainID       string `json:"chain_id"`
	// Run counts the documents composed under this id, from 1.
	Run      int    `json:"run"`
	Producer string `json:"producer,omitempty"`
	// Created is false when this producer had sent this document before:
	// the steps are the same, nothing new started.
	Created bool   `json:"created"`
	Steps   []Step `json:"steps"`
}

// ErrorReply is the body of an error answer.
type ErrorReply struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Findings are a refused document's problems (code composition_invalid).
	Findings []Finding `json:"findings,omitempty"`
}

// Config tunes the service.
type Config struct {
	// Logger logs every request. Defaults to discarding.
	Logger *slog.Logger
	// Timeout bounds each request's handling. Defaults to 30s.
	Timeout time.Duration
	// Wait is how long a request waits for RECEPTION to receive the steps
	// before it answers (the steps not received by then are pending).
	// Defaults to 5s.
	Wait time.Duration
	// MaxRequestBytes bounds a chain document. Defaults to 1 MiB.
	MaxRequestBytes int
	// MaxConcurrent bounds the requests served at once. Defaults to 16.
	MaxConcurrent int
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Rules judges every step before any starts (kinds and reviewers
	// served, paths, secrets, scope, ...). Defaults to rules.Config{}
	// with its defaults: only the built-in stub kind is served.
	Rules rules.Config
	// Models judges a step's task.model, as RECEPTION will (sagad's
	// "models" config); none allows no task.model.
	Models executors.Models
	// MaxRuns bounds the runs (edited documents) of one composition id.
	// Defaults to 100.
	MaxRuns int
	// Started, when set, is told the step count of every run this sagad
	// starts (the sagad_composition_steps histogram).
	Started func(steps int)
	// RepublishInterval is how often sagad tries again to publish the
	// steps a producer's full intake refused (Record's
	// PublishError). Defaults to 2s.
	RepublishInterval time.Duration

	// orphanScan is how often the republisher reads the records though
	// it knows of no backlog (orphanScanInterval; tests shorten it).
	orphanScan time.Duration
	// publishHook, set by tests only, runs before the request publishes
	// step i (a slow intake, a deadline running out part-way).
	publishHook func(ctx context.Context, i int)
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	if c.Wait <= 0 {
		c.Wait = 5 * time.Second
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = 1 << 20
	}
	if c.MaxConcurrent <= 0 {
		c.MaxConcurrent = 16
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.MaxRuns <= 0 {
		c.MaxRuns = 100
	}
	if c.RepublishInterval <= 0 {
		c.RepublishInterval = 2 * time.Second
	}
	if c.orphanScan <= 0 {
		c.orphanScan = orphanScanInterval
	}
	c.Rules = c.Rules.WithDefaults()
	return c
}

// Service is one sagad's instance of the compose service.
type Service struct {
	svc micro.Service
	js  jetstream.JetStream
	st  *store.Store
	cfg Config

	base    context.Context
	cancel  context.CancelFunc
	running sync.WaitGroup
	// nc answers the requests served on goroutines of their own.
	nc    *nats.Conn
	slots chan struct{}
	// backlog says a run may have steps a full intake refused: the
	// republisher scans the records while it is set (and once at start,
	// for those another sagad left).
	backlog atomic.Bool
}

// Start serves chain documents on nc until Stop. st must have its Chains
// bucket (store.Ensure creates it).
func Start(nc *nats.Conn, st *store.Store, cfg Config) (*Service, error) {
	if nc == nil || st == nil || st.Compositions == nil {
		return nil, errors.New("compose: a connection and a store with chains are required")
	}
	cfg = cfg.withDefaults()
	s := &Service{nc: nc, js: st.JetStream(), st: st, cfg: cfg, slots: make(chan struct{}, cfg.MaxConcurrent)}
	s.base, s.cancel = context.WithCancel(context.Background())
	svc, err := micro.AddService(nc, micro.Config{
		Name: Name, Version: Version,
		Description: "sagad compositions: a chain document in, its steps published with ids sagad assigned",
	})
	if err != nil {
		s.cancel()
		return nil, fmt.Errorf("compose: add service: %w", err)
	}
	for name, subj := range map[string]string{"compose": Subject, "compose_producer": Subject + ".*"} {
		if err := svc.AddEndpoint(name, micro.HandlerFunc(s.handle), micro.WithEndpointSubject(subj)); err != nil {
			_ = svc.Stop()
			s.cancel()
			return nil, fmt.Errorf("compose: endpoint %s: %w", subj, err)
		}
	}
	s.svc = svc
	if err := nc.Flush(); err != nil {
		_ = svc.Stop()
		s.cancel()
		return nil, fmt.Errorf("compose: flush: %w", err)
	}
	s.backlog.Store(true)
	s.running.Add(1)
	go s.republish()
	return s, nil
}

// orphanScanInterval is how often the republisher reads the records
// though it knows of no backlog.
const orphanScanInterval = time.Minute

// maxRepublishScan bounds the records one republish pass reads.
const maxRepublishScan = 10000

// republish publishes, every RepublishInterval while a backlog may
// exist, the steps of the runs whose compose request a full intake
// refused (settle: idempotent, the intake drops a step published twice).
// A step still refused waits for the next pass.
func (s *Service) republish() {
	defer s.running.Done()
	tick := time.NewTicker(s.cfg.RepublishInterval)
	defer tick.Stop()
	// Without a backlog known here, a pass now and then still finds the
	// steps of a request another sagad stopped serving (a crash).
	every := max(1, int(s.cfg.orphanScan/s.cfg.RepublishInterval))
	for n := 1; ; n++ {
		select {
		case <-s.base.Done():
			return
		case <-tick.C:
		}
		if !s.backlog.Swap(false) && n%every != 0 {
			continue
		}
		if s.republishPass() {
			s.backlog.Store(true)
		}
	}
}

// republishPass tries each run with refused steps once; it reports
// whether any still waits.
func (s *Service) republishPass() (waiting bool) {
	ctx, cancel := context.WithTimeout(s.base, s.cfg.Timeout)
	defer cancel()
	recs, err := listRecords(ctx, s.st, maxRepublishScan)
	if err != nil {
		s.cfg.Logger.Warn("compose: list runs to publish their waiting steps", "error", err)
		return true
	}
	for _, rec := range recs {
		if rec.PublishError == "" || len(rec.Unpublished) == 0 {
			continue
		}
		if rec.PublishError == publishingNow {
			var taken bool
			if rec, taken = s.takeOver(ctx, rec); !taken {
				waiting = true
				continue
			}
		}
		after, err := settle(ctx, s.st, rec, s.cfg.Now().UTC())
		if err != nil {
			s.cfg.Logger.Info("composition steps still wait for room on the producer's intake", "composition_id", rec.CompositionID,
				"producer", rec.Producer, "run", rec.RunOf(), "steps", len(rec.Unpublished), "error", err)
			waiting = true
			continue
		}
		if after != nil && after.PublishError != "" {
			waiting = true
		}
	}
	return waiting
}

// takeOver records as the republisher's the steps of a run whose compose
// request claimed them (publishingNow) and is past its deadline: it
// stopped (a crash) between recording the run and publishing them all.
// taken is false while the request may still publish them, or when the
// record could not be written (the next pass tries again).
func (s *Service) takeOver(ctx context.Context, rec *Record) (_ *Record, taken bool) {
	now := s.cfg.Now().UTC()
	if now.Before(rec.CreatedAt.Add(s.cfg.Timeout + claimSlack)) {
		return rec, false
	}
	after, err := apply(ctx, s.st, keyOf(rec), Event{Kind: KindPublishDeferred, At: now, Error: requestStopped}, inputs(ctx, s.st))
	if err != nil {
		s.cfg.Logger.Warn("compose: take over the steps of a stopped compose request", "composition_id", rec.CompositionID,
			"producer", rec.Producer, "run", rec.RunOf(), "error", err)
		return rec, false
	}
	s.cfg.Logger.Warn("compose: a compose request stopped before publishing its steps: sagad publishes them", "composition_id", rec.CompositionID,
		"producer", rec.Producer, "run", rec.RunOf(), "steps", len(after.Unpublished))
	return after, true
}

// Stop stops taking requests and cancels those in progress.
func (s *Service) Stop() error {
	err := s.svc.Stop()
	s.cancel()
	s.running.Wait()
	return err
}

// producerOf is the producer a request's subject names; ok is false for a
// subject that names none.
func producerOf(subject string) (string, bool) {
	if subject == Subject {
		return "", true
	}
	p, found := strings.CutPrefix(subject, Subject+".")
	if !found || p == "" || !store.ValidProducer(p) {
		return "", false
	}
	return p, true
}

// handle serves req on a goroutine of its own, at most MaxConcurrent at
// once: a request waits for RECEPTION (Config.Wait), and one producer's
// slow requests must not hold up everyone's.
func (s *Service) handle(req micro.Request) {
	s.running.Add(1)
	select {
	case s.slots <- struct{}{}:
	case <-s.base.Done():
		s.running.Done()
		return
	}
	go func() {
		defer s.running.Done()
		defer func() { <-s.slots }()
		// Answered after handle returned: through a copy micro does not
		// read (see package microreply).
		s.serveRequest(microreply.Detach(s.nc, req))
	}()
}

func (s *Service) serveRequest(req micro.Request) {
	ctx, cancel := context.WithTimeout(s.base, s.cfg.Timeout)
	defer cancel()
	start := s.cfg.Now()
	reply, err := s.serve(ctx, req.Subject(), req.Data())
	if err == nil {
		if rerr := req.RespondJSON(reply); rerr != nil {
			s.cfg.Logger.Warn("compose reply", "error", rerr)
		}
		s.cfg.Logger.Info("composition composed", "composition_id", reply.CompositionID, "run", reply.Run, "producer", reply.Producer, "created", reply.Created,
			"steps", len(reply.Steps), "took", s.cfg.Now().Sub(start))
		return
	}
	e := ErrorReply{Code: CodeInternal, Message: err.Error()}
	status := "500"
	var re *requestError
	var de *DocError
	switch {
	case errors.As(err, &re):
		e.Code, status = CodeBadRequest, "400"
	case errors.As(err, &de):
		e.Code, status, e.Findings = CodeInvalid, "422", de.Findings
	}
	body, _ := json.Marshal(e)
	if rerr := req.Error(status, e.Message, body); rerr != nil {
		s.cfg.Logger.Warn("compose reply", "error", rerr)
	}
	s.cfg.Logger.Info("composition refused", "code", e.Code, "findings", len(e.Findings), "error", e.Message)
}

type requestError struct{ msg string }

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &requestError{msg: fmt.Sprintf(format, args...)}
}

func (s *Service) serve(ctx context.Context, subject string, data []byte) (Reply, error) {
	producer, ok := producerOf(subject)
	if !ok {
		return Reply{}, badRequest("subject %q names no producer", subject)
	}
	if len(data) > s.cfg.MaxRequestBytes {
		return Reply{}, badRequest("chain document of %d bytes exceeds %d", len(data), s.cfg.MaxRequestBytes)
	}
	doc, err := Parse(data)
	if err != nil {
		return Reply{}, err
	}
	// Judged whole before anything is recorded or published: a document
	// with one bad step starts nothing and spends nothing.
	if fs := CheckModels(doc, s.cfg.Rules, s.cfg.Models, s.cfg.Now()); len(fs) > 0 {
		return Reply{}, &DocError{Findings: fs}
	}
	rec, created, err := s.assign(ctx, doc, producer, data)
	if err != nil {
		return Reply{}, err
	}
	if doc.Budget != nil {
		// The run's budget is a wave: each step reserves its caps against
		// it at AUTOMATED_GATES, and one that does not fit waits.
		if s.st.Budgets == nil {
			return Reply{}, fmt.Errorf("composition %s: this sagad keeps no budgets", doc.ID)
		}
		if err := s.st.Budgets.SetWave(ctx, waveOf(rec), doc.Budget.Tokens, doc.Budget.Dollars, false); err != nil {
			return Reply{}, fmt.Errorf("composition %s: %w", doc.ID, err)
		}
		s.st.WaveChanged()
	}
	if created {
		// Before the steps: a run's first event is its start.
		if err := s.st.PublishEvent(ctx, startedEvent(rec, rec.CreatedAt)); err != nil {
			return Reply{}, err
		}
		if s.cfg.Started != nil {
			s.cfg.Started(len(doc.Steps))
		}
	}
	steps, pending, perr, err := s.publishRun(ctx, doc, rec, producer)
	if err != nil {
		return Reply{}, err
	}
	// The request's deadline may have run out while it published: what
	// it published, and what it leaves to the republisher, is recorded
	// under a deadline of its own.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if err := s.recordPublished(wctx, doc, rec, data, steps, created, pending, perr); err != nil {
		s.backlog.Store(true) // the record may still say this request publishes them
		return Reply{}, err
	}
	out := Reply{CompositionID: doc.ID, ChainID: doc.ID, Run: rec.RunOf(), Producer: producer, Created: created, Steps: steps}
	s.await(ctx, producer, out.Steps)
	return out, nil
}

// publishingNow is a new run's PublishError while its compose request
// publishes the steps (all recorded unpublished when the run is made):
// nobody else publishes them before the request's deadline (see
// [EffectsOf]); the republisher takes them over after it.
const publishingNow = "the compose request is publishing them"

// requestStopped is the PublishError the republisher records when it
// takes over the steps of a request that stopped without saying why (a
// crash of the sagad serving it).
const requestStopped = "the compose request stopped before publishing them"

// stepPublishTimeout bounds one step's publish (and the request's
// deadline bounds them all): a slow intake stops the request part-way,
// the rest going to the republisher, rather than holding it.
const stepPublishTimeout = 5 * time.Second

// recordTimeout bounds the record's write after the steps' publishes.
const recordTimeout = 10 * time.Second

// claimSlack is how long past a request's deadline the republisher
// leaves its steps to it (its last write has a deadline of its own).
const claimSlack = recordTimeout

// startsAtOnce are the indexes of n steps but those held.
func startsAtOnce(n int, held []int) []int {
	out := make([]int, 0, n)
	for i := range n {
		if !slices.Contains(held, i) {
			out = append(out, i)
		}
	}
	return out
}

// publishRun publishes the steps of rec's run that start at once: all
// but those held until a loop before them passes. Sent again, a document
// publishes again what still builds as recorded (a step in a loop's later
// round, or released on later rounds' ids, was published by the runner),
// and its reply names the steps as the first did: a loop's steps by their
// round-1 capsules.
//
// Publishing may stop part-way: the intake refuses a step (the producer's
// backlog full), a publish fails or outlives its deadline, the request's
// deadline runs out. None is an error: the step and every step after it
// that was to be published are pending, with the reason, for sagad to
// publish as room appears (recordPublished); the run is recorded either
// way, so it must not be left half-started. Only a document that no
// longer builds is an error.
func (s *Service) publishRun(ctx context.Context, doc *Doc, rec *Record, producer string) (steps []Step, pending []int, perr, err error) {
	ids := roundOneIDs(rec)
	capsules, digests, err := doc.Build(ids, rec.RunOf())
	if err != nil {
		return nil, nil, nil, badRequest("%v", err)
	}
	if len(doc.Loops) == 0 && !slices.Equal(digests, rec.StepDigests) {
		return nil, nil, nil, fmt.Errorf("composition %s: steps no longer build as recorded", doc.ID)
	}
	out := make([]Step, len(capsules))
	for i, raw := range capsules {
		out[i] = Step{Step: i, Name: doc.Steps[i].Name, CapsuleID: ids[i], Digest: rec.StepDigests[i], State: StepPending}
		if ids[i] != rec.Steps[i] {
			// A later round of its loop runs: round 1's was received.
			out[i].State, out[i].Digest = StepReceived, ""
			if cp, _, err := s.st.Checkpoints.Get(ctx, ids[i]); err == nil {
				out[i].Digest = cp.Digest
			}
			continue
		}
		if slices.Contains(rec.Held, i) {
			out[i].State = StepHeld
			continue
		}
		if digests[i] != rec.StepDigests[i] {
			continue // a later round's, or released: the runner published it
		}
		if perr == nil {
			if s.cfg.publishHook != nil {
				s.cfg.publishHook(ctx, i)
			}
			pctx, cancel := context.WithTimeout(ctx, stepPublishTimeout)
			ack, err := publishStep(pctx, s.js, producer, rec.Steps[i], raw, digests[i])
			cancel()
			if err == nil {
				if !ack.Duplicate {
					out[i].IntakeSeq = ack.Sequence
				}
				continue
			}
			perr = fmt.Errorf("publish step %s: %w", doc.Steps[i].Name, err)
		}
		// In order: the steps after a refused one wait for it.
		out[i].State = StepUnpublished
		pending = append(pending, i)
	}
	return out, pending, perr, nil
}

// recordPublished records the steps publishRun published (their
// composition_step_started events come of it) and leaves those pending
// to the republisher (deferSteps). A new run's record holds every step
// unpublished already; a run made before (the same document sent again)
// has the pending steps added.
func (s *Service) recordPublished(ctx context.Context, doc *Doc, rec *Record, data []byte, steps []Step, created bool, pending []int, perr error) error {
	published := map[int]string{}
	for _, st := range steps {
		if st.State == StepPending && st.Step < len(rec.Steps) && rec.Steps[st.Step] == st.CapsuleID {
			published[st.Step] = st.CapsuleID
		}
	}
	if len(published) > 0 {
		if _, err := apply(ctx, s.st, keyOf(rec), Event{Kind: KindStepsPublished, At: s.cfg.Now().UTC(), Published: published}, inputs(ctx, s.st)); err != nil {
			return fmt.Errorf("composition %s: record its published steps: %w", doc.ID, err)
		}
	}
	if len(pending) == 0 {
		return nil
	}
	if created {
		pending = nil // recorded unpublished with the run: only the reason changes
	}
	return s.deferSteps(ctx, doc, rec, data, pending, perr)
}

// deferSteps records the steps the intake refused as unpublished, with
// the refusal, and keeps the document (which builds them), so that sagad
// publishes them itself as room appears: the run is never left recorded
// running with steps nobody publishes. No steps: those recorded
// unpublished already wait, for the reason perr.
func (s *Service) deferSteps(ctx context.Context, doc *Doc, rec *Record, data []byte, pending []int, perr error) error {
	if err := s.st.Compositions.PutDoc(ctx, doc.ID, rec.Producer, rec.Digest, data); err != nil {
		return fmt.Errorf("composition %s: keep the document for its unpublished steps: %w", doc.ID, err)
	}
	_, err := apply(ctx, s.st, keyOf(rec), Event{Kind: KindPublishDeferred, At: s.cfg.Now().UTC(), Steps: pending, Error: perr.Error()}, inputs(ctx, s.st))
	if err != nil {
		return fmt.Errorf("composition %s: record its unpublished steps: %w", doc.ID, err)
	}
	s.cfg.Logger.Warn("composition steps wait to be published: sagad publishes them itself", "composition_id", doc.ID,
		"producer", rec.Producer, "run", rec.RunOf(), "error", perr)
	s.backlog.Store(true)
	return nil
}

// maxPublishError bounds the refusal a record keeps.
const maxPublishError = 512

// roundOneIDs are rec's step ids as its run started: a loop's later
// rounds replace its steps' ids in rec.Steps.
func roundOneIDs(rec *Record) []string {
	ids := slices.Clone(rec.Steps)
	for _, l := range rec.Loops {
		for p, i := range l.Steps {
			ids[i] = l.Rounds[0].IDs[p]
		}
	}
	return ids
}

// assign returns producer's run of doc: the recorded run of this very
// document, or a new run (fresh step ids) after the last when the
// document is new or edited; created says it made one.
func (s *Service) assign(ctx context.Context, doc *Doc, producer string, data []byte) (*Record, bool, error) {
	sum := sha256.Sum256(data)
	digest := hex.EncodeToString(sum[:])
	for run := 1; run <= s.cfg.MaxRuns; {
		rec, err := GetRun(ctx, s.st, doc.ID, producer, run)
		if err == nil {
			if rec.Digest == digest {
				return rec, false, nil
			}
			run++
			continue
		}
		if !errors.Is(err, store.ErrNotFound) {
			return nil, false, err
		}
		ids, err := NewStepIDs(len(doc.Steps))
		if err != nil {
			return nil, false, err
		}
		_, digests, err := doc.Build(ids, run)
		if err != nil {
			return nil, false, badRequest("%v", err)
		}
		rec = &Record{
			CompositionID: doc.ID, Producer: producer, Digest: digest,
			Steps: ids, StepDigests: digests, CreatedAt: s.cfg.Now().UTC(),
		}
		if run > 1 {
			rec.Run = run
		}
		// Kept before the run is recorded: whoever publishes the run's
		// steps if this request stops part-way (the republisher), and the
		// runner building a loop's rounds, builds them from it.
		if err := s.st.Compositions.PutDoc(ctx, doc.ID, producer, digest, data); err != nil {
			return nil, false, err
		}
		if len(doc.Loops) > 0 {
			rec.Loops, rec.Held = doc.planLoops(ids)
		}
		// Recorded unpublished, claimed by this request until its
		// deadline: a crash between this write and the last publish
		// leaves the rest to the republisher, never to nobody.
		rec.Unpublished, rec.PublishError = startsAtOnce(len(ids), rec.Held), publishingNow
		if !doc.Chain {
			index := make(map[string]int, len(doc.Steps))
			for i, st := range doc.Steps {
				index[st.Name] = i
			}
			for _, st := range doc.Steps {
				rec.Names = append(rec.Names, st.Name)
				needs := make([]int, 0, len(st.Needs))
				for _, n := range st.Needs {
					needs = append(needs, index[n])
				}
				rec.Needs = append(rec.Needs, needs)
			}
		}
		err = CreateRecord(ctx, s.st, rec)
		if err == nil {
			return rec, true, nil
		}
		if !errors.Is(err, store.ErrCompositionExists) {
			return nil, false, err
		}
		// Another sagad made this run at the same moment: look at it
		// again, it may be this very document.
	}
	return nil, false, badRequest("composition %s has %d runs already: choose another composition_id", doc.ID, s.cfg.MaxRuns)
}

// await waits (at most cfg.Wait) until RECEPTION holds every step, and
// marks each received, foreign or (still) pending.
func (s *Service) await(ctx context.Context, producer string, steps []Step) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Wait)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		left := 0
		for i := range steps {
			if steps[i].State != StepPending {
				continue
			}
			cp, _, err := s.st.Checkpoints.Get(ctx, steps[i].CapsuleID)
			switch {
			case err == nil && cp.Digest == steps[i].Digest && cp.Producer == producer && cp.State.Status == capsule.Halted && cp.State.Phase == capsule.Reception:
				// Halted where it arrived (a deadline passed since the
				// check): it ends under its id, and its run records it.
				steps[i].State, steps[i].HaltReason = StepRefused, cp.State.HaltReason
				continue
			case err == nil && cp.Digest == steps[i].Digest && cp.Producer == producer:
				steps[i].State = StepReceived
				continue
			case err == nil:
				steps[i].State = StepForeign
				continue
			}
			// A step RECEPTION halted is kept under its intake sequence.
			if seq := steps[i].IntakeSeq; seq != 0 {
				if cp, _, err := s.st.Checkpoints.Get(ctx, "x-"+strconv.FormatUint(seq, 10)); err == nil && cp.Producer == producer {
					steps[i].State, steps[i].HaltReason = StepRefused, cp.State.HaltReason
					continue
				}
			}
			left++
		}
		if left == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
