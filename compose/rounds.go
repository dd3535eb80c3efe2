package compose

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/store"
)

// verdict is what a round's verifier said.
type verdict struct {
	// passed: completed, its last review APPROVED by its reviewer (not an
	// operator's accept over another verdict).
	passed bool
	// count is how many findings it raised; findings are the first
	// [capsule.MaxChainFindings] of them, for the next round.
	count    int
	findings []capsule.Finding
	// artifact is the last artifact the verifier made, if any.
	artifact string
}

// verdictOf reads the verdict of a verifier that ended as cp: its last
// review's findings (after an operator's revise, the reviewer's and the
// operator's), else the findings it halted with, else its halt reason as
// the one finding.
func verdictOf(cp *capsule.Checkpoint) verdict {
	var v verdict
	reviews := cp.State.Reviews
	if n := len(reviews); n > 0 {
		last := reviews[n-1]
		v.passed = cp.State.Status == capsule.Completed && last.Verdict == capsule.Approved &&
			!strings.HasPrefix(last.ReviewerID, capsule.OperatorReviewerPrefix)
	}
	if refs := cp.State.ArtifactRefs; len(refs) > 0 {
		v.artifact = refs[len(refs)-1]
	}
	if v.passed {
		return v
	}
	fs := cp.RevisionFindings()
	if len(fs) == 0 {
		fs = cp.State.Findings
	}
	if len(fs) == 0 {
		msg := fmt.Sprintf("the verifier ended %s", cp.State.Status)
		if cp.State.HaltReason != "" {
			msg += ": " + cp.State.HaltReason
		}
		fs = []capsule.Finding{{Message: msg}}
	}
	v.count = len(fs)
	for _, f := range capsule.CapFindings(fs, capsule.MaxChainFindings) {
		f.Title = capsule.Truncate(f.Title, capsule.MaxFindingField)
		f.Rule = max(f.Rule, 0)
		f.Source = capsule.FindingSourceVerifier
		v.findings = append(v.findings, f)
	}
	return v
}

// verdictLookup returns the verdict of the verifier whose capsule id is id.
type verdictLookup func(ctx context.Context, id string) (verdict, error)

// checkpointVerdict reads a verifier's verdict from its checkpoint.
func checkpointVerdict(st *store.Store) verdictLookup {
	return func(ctx context.Context, id string) (verdict, error) {
		cp, _, err := st.Checkpoints.Get(ctx, id)
		if err != nil {
			return verdict{}, fmt.Errorf("verifier %s: %w", id, err)
		}
		return verdictOf(cp), nil
	}
}

// buildRecorded builds step i of rec as the record says it is now: under
// rec's ids, in its loop's current round, a loop step of round r > 1 with
// the findings and artifact of round r-1's verifier and its own last
// artifact of round r-1. The same record builds the same bytes (an ended
// capsule's verdict and artifacts do not change).
func buildRecorded(ctx context.Context, doc *Doc, rec *Record, i int, lookup verdictLookup) ([]byte, string, error) {
	b := stepBuild{run: rec.RunOf(), wave: waveOf(rec)}
	for _, j := range needsIdx(rec, i) {
		if m := loopOf(rec, j); m < 0 || rec.Loops[m].State != LoopAccepted || j >= len(rec.Ended) || rec.Ended[j].State == string(capsule.Completed) {
			continue
		}
		v, err := lookup(ctx, rec.Steps[j])
		if err != nil {
			return nil, "", err
		}
		if b.accepted == nil {
			b.accepted = map[int]string{}
		}
		b.accepted[j] = v.artifact
	}
	if k := loopOf(rec, i); k >= 0 {
		l := &rec.Loops[k]
		if l.Round > 1 {
			b.round = l.Round
			if i != l.Verifier() {
				before := l.Rounds[l.Round-2].IDs
				v, err := lookup(ctx, before[len(l.Steps)-1])
				if err != nil {
					return nil, "", err
				}
				b.findings = v.findings
				if v.artifact != "" {
					b.refs = []string{v.artifact}
				}
				// The step revises what it made itself in the round
				// before, beside what its verifier said of it.
				own, err := lookup(ctx, before[slices.Index(l.Steps, i)])
				if err != nil {
					return nil, "", err
				}
				b.prior = own.artifact
			}
		}
	}
	return doc.buildStep(i, rec.Steps, b)
}

// needsIdx are the steps step i of rec needs.
func needsIdx(rec *Record, i int) []int {
	if i < len(rec.Needs) {
		return rec.Needs[i]
	}
	return nil
}

// loadDoc reads the document of rec's run, which must be the one rec was
// made of (its digest).
func loadDoc(ctx context.Context, st *store.Store, rec *Record) (*Doc, error) {
	b, err := st.Compositions.Doc(ctx, rec.CompositionID, rec.Producer, rec.Digest)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != rec.Digest {
		return nil, fmt.Errorf("composition %s run %d: the kept document is not the run's", rec.CompositionID, rec.RunOf())
	}
	return Parse(b)
}

// publishStep publishes a step's sealed capsule on producer's intake
// subject, as if the producer had: RECEPTION reads the producer from the
// subject, and the step counts against the producer's quota. The same
// step again within the intake's duplicate window is not even stored.
func publishStep(ctx context.Context, js jetstream.JetStream, producer, id string, raw []byte, digest string) (*jetstream.PubAck, error) {
	m := nats.NewMsg(store.IntakeSubjectOf(producer))
	m.Data = raw
	m.Header.Set(jetstream.MsgIDHeader, "compose."+id+"."+digest[:16])
	return js.PublishMsg(ctx, m)
}

// settle publishes the steps rec records as unpublished (a loop's new
// round, the steps a loop released) and records them published; in a
// cancelled run it ends them cancelled instead. A run paused by a person
// keeps them until it is resumed. Idempotent: whoever reads the record
// after a crash publishes the same bytes again, which the intake drops.
func settle(ctx context.Context, st *store.Store, rec *Record, now time.Time) (*Record, error) {
	if !EffectsOf(rec).Publish {
		return rec, nil
	}
	published := map[int]string{}
	if rec.State != StateCancelled {
		doc, err := loadDoc(ctx, st, rec)
		if err != nil {
			return rec, err
		}
		for _, i := range rec.Unpublished {
			raw, digest, err := buildRecorded(ctx, doc, rec, i, checkpointVerdict(st))
			if err != nil {
				return rec, err
			}
			if digest != rec.StepDigests[i] {
				return rec, fmt.Errorf("composition %s step %d: no longer builds as recorded", rec.CompositionID, i)
			}
			if _, err := publishStep(ctx, st.JetStream(), rec.Producer, rec.Steps[i], raw, digest); err != nil {
				return rec, fmt.Errorf("composition %s: publish step %d: %w", rec.CompositionID, i, err)
			}
			published[i] = rec.Steps[i]
		}
	}
	return apply(ctx, st, keyOf(rec), Event{Kind: KindStepsPublished, At: now, Published: published}, inputs(ctx, st))
}

// endCancelled records step i of a cancelled run, never published, as
// cancelled.
func endCancelled(r *Record, i int) {
	ensureEnded(r)
	if r.Ended[i].State == "" {
		r.Ended[i] = StepEnd{State: string(capsule.Cancelled), HaltReason: compositionCancelled}
	}
}

func ensureEnded(r *Record) {
	if len(r.Ended) == 0 {
		r.Ended = make([]StepEnd, len(r.Steps))
	}
}

// endIfDone gives a run whose steps all ended its state (see
// [EndState]), unless it was cancelled or a loop waits for
// a person.
func endIfDone(r *Record, now time.Time) {
	if !r.AllEnded() || len(r.Held) > 0 || len(r.Unpublished) > 0 || r.State == StateCancelled || waitingForPerson(r) {
		return
	}
	passed := 0
	for _, e := range r.Ended {
		if e.State == string(capsule.Completed) {
			passed++
		}
	}
	r.State = EndState(passed, len(r.Ended))
	r.EndedAt = &now
}

// roundEnded judges loop k of rec once every step of its round ended (the
// step just recorded may have been the last): the verifier passed (the
// steps after the loop are released), or max_rounds ran (the loop fails,
// the steps after it never start), or two rounds in a row made no
// progress (the run waits for a person), or the next round is recorded,
// under fresh ids, to be published. doc is read only when a round starts
// or steps are released. It returns the events to send.
func roundEnded(ctx context.Context, rec *Record, k int, now time.Time, lookup verdictLookup, doc func() (*Doc, error)) ([]capsule.Event, error) {
	l := &rec.Loops[k]
	if l.State != "" || slices.ContainsFunc(l.Steps, func(i int) bool { return rec.Ended[i].State == "" }) {
		return nil, nil
	}
	v, err := lookup(ctx, rec.Steps[l.Verifier()])
	if err != nil {
		return nil, err
	}
	rd := &l.Rounds[l.Round-1]
	rd.Ended, rd.Passed, rd.Findings = true, v.passed, v.count
	for _, i := range l.Steps {
		rd.Tokens += rec.Ended[i].Tokens
		rd.Dollars += rec.Ended[i].Dollars
	}
	switch {
	case v.passed:
		l.State = LoopPassed
		if err := release(ctx, rec, lookup, doc); err != nil {
			return nil, err
		}
	case rec.State == StateCancelled:
		return nil, nil
	case l.Round >= l.MaxRounds || upstreamFailed(rec, l):
		// Out of rounds, or a step the loop needs from outside it failed:
		// another round would fail the same way.
		l.State = LoopFailed
		fail(rec, k)
	case stalled(l):
		l.State = LoopNoProgress
		rec.State, rec.By, rec.Reason = StatePaused, capsule.BySagad, ReasonNoProgress
	default:
		d, err := doc()
		if err != nil {
			return nil, err
		}
		if d.roundExpired(l.Steps, now) {
			// RECEPTION would refuse the round (deadline_in_past): the
			// loop ends as if out of rounds.
			l.State = LoopFailed
			fail(rec, k)
			break
		}
		if err := newRound(ctx, d, rec, k, v, lookup); err != nil {
			return nil, err
		}
		return []capsule.Event{loopEvent(rec, k, EventRoundStarted,
			fmt.Sprintf("round %d of %d: the verifier raised %d findings", l.Round, l.MaxRounds, v.count))}, nil
	}
	l.At = &now
	return []capsule.Event{loopEvent(rec, k, EventLoopEnded,
		fmt.Sprintf("%s after round %d: the verifier raised %d findings", l.State, l.Round, v.count))}, nil
}

// upstreamFailed reports whether a step outside loop l that one of its
// steps needs ended without completing.
func upstreamFailed(rec *Record, l *LoopRun) bool {
	for _, i := range l.Steps {
		for _, j := range needsIdx(rec, i) {
			if slices.Contains(l.Steps, j) || j >= len(rec.Ended) || rec.Ended[j].State == "" || rec.Ended[j].State == string(capsule.Completed) {
				continue
			}
			if m := loopOf(rec, j); m < 0 || rec.Loops[m].State != LoopAccepted {
				return true // an accepted loop's step is read, not waited for
			}
		}
	}
	return false
}

// roundExpired reports whether a step of steps has a deadline (its own,
// or the composition's) that is not after now.
func (d *Doc) roundExpired(steps []int, now time.Time) bool {
	if d.Deadline != nil && !d.Deadline.After(now) {
		return true
	}
	for _, i := range steps {
		var t struct {
			Deadline time.Time `json:"deadline"`
		}
		if json.Unmarshal(d.Steps[i].tmpl, &t) == nil && !t.Deadline.IsZero() && !t.Deadline.After(now) {
			return true
		}
	}
	return false
}

// newRound records loop k's next round: fresh ids for its steps, their
// bytes' digests (built with v, the verifier's verdict on the round that
// ended, and each step's own last artifact, read by lookup), to be
// published.
func newRound(ctx context.Context, doc *Doc, rec *Record, k int, v verdict, lookup verdictLookup) error {
	l := &rec.Loops[k]
	verifier := rec.Steps[l.Verifier()]
	ids, err := NewStepIDs(len(l.Steps))
	if err != nil {
		return err
	}
	for p, i := range l.Steps {
		rec.Steps[i], rec.Ended[i] = ids[p], StepEnd{}
	}
	l.Round++
	l.Rounds = append(l.Rounds, LoopRound{IDs: ids})
	known := func(ctx context.Context, id string) (verdict, error) {
		if id == verifier {
			return v, nil
		}
		return lookup(ctx, id)
	}
	for _, i := range l.Steps {
		_, digest, err := buildRecorded(ctx, doc, rec, i, known)
		if err != nil {
			return err
		}
		rec.StepDigests[i] = digest
		rec.Unpublished = append(rec.Unpublished, i)
	}
	return nil
}

// release records the held steps whose loops all passed (or were
// accepted) as unpublished, built on the loops' last rounds.
func release(ctx context.Context, rec *Record, lookup verdictLookup, doc func() (*Doc, error)) error {
	reach := recordReach(rec)
	var free []int
	rec.Held = slices.DeleteFunc(rec.Held, func(j int) bool {
		blocked := slices.ContainsFunc(rec.Loops, func(l LoopRun) bool {
			return !l.Settled() && downstreamOf(reach, l.Steps, j)
		})
		if !blocked {
			free = append(free, j)
		}
		return !blocked
	})
	if len(free) == 0 {
		return nil
	}
	d, err := doc()
	if err != nil {
		return err
	}
	for _, j := range free {
		_, digest, err := buildRecorded(ctx, d, rec, j, lookup)
		if err != nil {
			return err
		}
		rec.StepDigests[j] = digest
		rec.Unpublished = append(rec.Unpublished, j)
	}
	return nil
}

// fail ends the held steps after loop k, never published, as halted
// dependency_failed on its last verifier (what a step needing a failed
// step gets); a loop among them never ran and fails too.
func fail(rec *Record, k int) {
	ensureEnded(rec)
	reach := recordReach(rec)
	l := rec.Loops[k]
	reason := capsule.DependencyFailed(rec.Steps[l.Verifier()]).String()
	rec.Held = slices.DeleteFunc(rec.Held, func(j int) bool {
		if !downstreamOf(reach, l.Steps, j) {
			return false
		}
		rec.Ended[j] = StepEnd{State: string(capsule.Halted), HaltReason: reason}
		if m := loopOf(rec, j); m >= 0 && rec.Loops[m].State == "" {
			rec.Loops[m].State = LoopFailed
		}
		return true
	})
}

// loopEvent is an event of loop k of rec, its id unique per loop, round
// and kind (so a retry sends it once).
func loopEvent(rec *Record, k int, kind capsule.EventKind, detail string) capsule.Event {
	l := rec.Loops[k]
	key := EventKey(rec.CompositionID, rec.Producer)
	return capsule.Event{
		ID:   fmt.Sprintf("%s.run%d%s.loop%d.round%d.%s.%s", key, rec.RunOf(), replayTag(rec.Replays), k, l.Round, kind, l.StateOf()),
		Kind: kind, Key: key, CapsuleID: rec.Steps[l.Verifier()],
		Step: stepIndex(l.Verifier()), StepName: stepName(rec, l.Verifier()), Round: l.Round,
		Detail: fmt.Sprintf("run %d loop of verifier %s: %s", rec.RunOf(), stepName(rec, l.Verifier()), detail),
	}
}

// stepName is step i's name in rec.
func stepName(rec *Record, i int) string {
	if i < len(rec.Names) {
		return rec.Names[i]
	}
	return ChainStepName(i)
}
