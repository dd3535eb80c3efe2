package compose

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
)

var machineAt = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

// machineDoc is draft → check → publish, check verifying draft in a loop
// of at most three rounds.
func machineDoc(t *testing.T) *Doc {
	t.Helper()
	var steps []any
	for _, s := range []struct{ name, kind, need string }{{"draft", "produce", ""}, {"check", "validate", "draft"}, {"publish", "translate", "check"}} {
		tmpl := capsuletest.New().Delete("capsule_id").Set("task.kind", s.kind).Set("task.title", s.name).
			Set("created_at", machineAt.Format(time.RFC3339)).Set("deadline", machineAt.Add(time.Hour).Format(time.RFC3339)).
			Set("spec.approved_at", machineAt.Add(-time.Minute).Format(time.RFC3339))
		st := map[string]any{"name": s.name, "capsule": map[string]any(tmpl)}
		if s.need != "" {
			st["needs"] = []string{s.need}
		}
		steps = append(steps, st)
	}
	b, err := json.Marshal(map[string]any{"composition_id": "m", "steps": steps,
		"loops": []any{map[string]any{"steps": []string{"draft"}, "verifier": "check", "max_rounds": 3}}})
	require.NoError(t, err)
	d, err := Parse(b)
	require.NoError(t, err)
	return d
}

// machineRecord is machineDoc's run 1 as compose records it: publish held
// until the loop passes.
func machineRecord(t *testing.T, d *Doc) *Record {
	t.Helper()
	ids := []string{"11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222", "33333333-3333-4333-8333-333333333333"}
	_, digests, err := d.Build(ids, 1)
	require.NoError(t, err)
	rec := &Record{CompositionID: "m", Producer: "p", Digest: "d", Steps: ids, StepDigests: digests, CreatedAt: machineAt,
		Names: []string{"draft", "check", "publish"}, Needs: [][]int{{}, {0}, {1}}}
	rec.Loops, rec.Held = d.planLoops(ids)
	return rec
}

func completed(artifact string) StepEnd {
	return StepEnd{State: string(capsule.Completed), Artifact: artifact, Tokens: 10}
}

// TestTransition: every composition event kind, as the capsule machine's
// transitions are tested: what it does to a record, the events it sends,
// its refusals and its repeats; the record it was given is never changed.
func TestTransition(t *testing.T) {
	t.Parallel()
	doc := machineDoc(t)
	base := func() *Record { return machineRecord(t, doc) }
	// verdicts: check rejects round 1 with a finding, approves round 2.
	in := Inputs{
		Verdict: func(_ context.Context, id string) (verdict, error) {
			switch id {
			case "22222222-2222-4222-8222-222222222222":
				return verdict{count: 1, findings: []capsule.Finding{{Message: "cite a source"}}, artifact: "artifact:" + id + "/1"}, nil
			case "11111111-1111-4111-8111-111111111111":
				return verdict{artifact: "artifact:" + id + "/1"}, nil
			}
			return verdict{passed: true, artifact: "artifact:" + id + "/1"}, nil
		},
		Doc: func(*Record) (*Doc, error) { return doc, nil },
	}
	with := func(change func(r *Record)) func() *Record {
		return func() *Record { r := base(); change(r); return r }
	}
	ended := func(r *Record, i int, e StepEnd) {
		ensureEnded(r)
		r.Ended[i] = e
	}
	chain := func() *Record { // no loop: draft → check → publish
		r := base()
		r.Loops, r.Held = nil, nil
		return r
	}
	type row struct {
		name    string
		rec     func() *Record
		ev      Event
		err     error
		changed bool
		events  []capsule.EventKind
		check   func(t *testing.T, r *Record, evs []capsule.Event)
	}
	rows := []row{
		{name: "started", rec: func() *Record { return nil }, ev: Event{Kind: KindStarted, Record: machineRecord(t, doc)},
			changed: true, events: []capsule.EventKind{EventStarted},
			check: func(t *testing.T, r *Record, _ []capsule.Event) {
				require.Equal(t, machineRecord(t, doc), r)
			}},
		{name: "started again", rec: base, ev: Event{Kind: KindStarted, Record: machineRecord(t, doc)}, err: ErrBadEvent},
		{name: "an event before started", rec: func() *Record { return nil }, ev: Event{Kind: KindPaused}, err: ErrBadEvent},
		{name: "unknown kind", rec: base, ev: Event{Kind: "exploded"}, err: ErrBadEvent},

		{name: "steps published", rec: with(func(r *Record) { r.Unpublished, r.PublishError = []int{0, 1}, "full" }),
			ev: Event{Kind: KindStepsPublished, Published: map[int]string{0: "11111111-1111-4111-8111-111111111111"}}, changed: true,
			events: []capsule.EventKind{EventStepStarted},
			check: func(t *testing.T, r *Record, evs []capsule.Event) {
				require.Equal(t, []int{1}, r.Unpublished, "what was not published stays to publish")
				require.Equal(t, "full", r.PublishError)
				require.Equal(t, 0, *evs[0].Step)
				require.Equal(t, "draft", evs[0].StepName)
				require.Equal(t, "11111111-1111-4111-8111-111111111111", evs[0].CapsuleID)
			}},
		{name: "steps published under an older id", rec: with(func(r *Record) { r.Unpublished = []int{0} }),
			ev: Event{Kind: KindStepsPublished, Published: map[int]string{0: "old"}}, changed: true,
			check: func(t *testing.T, r *Record, _ []capsule.Event) { require.Equal(t, []int{0}, r.Unpublished) }},
		{name: "steps published, none unpublished", rec: base, ev: Event{Kind: KindStepsPublished}},
		{name: "steps published in a cancelled run end cancelled", rec: with(func(r *Record) {
			r.Unpublished, r.State = []int{2}, StateCancelled
		}), ev: Event{Kind: KindStepsPublished}, changed: true,
			check: func(t *testing.T, r *Record, _ []capsule.Event) {
				require.Empty(t, r.Unpublished)
				require.Equal(t, StepEnd{State: string(capsule.Cancelled), HaltReason: compositionCancelled}, r.Ended[2])
			}},

		{name: "publish deferred", rec: base, ev: Event{Kind: KindPublishDeferred, Steps: []int{0, 1, 0, 9}, Error: "maximum messages per subject exceeded"},
			changed: true, check: func(t *testing.T, r *Record, _ []capsule.Event) {
				require.Equal(t, []int{0, 1}, r.Unpublished)
				require.Equal(t, "maximum messages per subject exceeded", r.PublishError)
			}},
		{name: "publish deferred: the claim of a request past its deadline replaced", rec: with(func(r *Record) {
			r.Unpublished, r.PublishError = []int{0, 1}, publishingNow
			require.False(t, EffectsOf(r).Publish, "nobody but the request publishes while it claims the steps")
		}), ev: Event{Kind: KindPublishDeferred, Error: "publish step draft: context deadline exceeded"},
			changed: true, check: func(t *testing.T, r *Record, _ []capsule.Event) {
				require.Equal(t, []int{0, 1}, r.Unpublished)
				require.Equal(t, "publish step draft: context deadline exceeded", r.PublishError)
				require.True(t, EffectsOf(r).Publish, "left to the republisher")
			}},
		{name: "publish deferred without steps once the claim was replaced", rec: with(func(r *Record) { r.Unpublished, r.PublishError = []int{1}, "full" }),
			ev: Event{Kind: KindPublishDeferred, Error: requestStopped}},
		{name: "publish deferred without steps once all were published", rec: base, ev: Event{Kind: KindPublishDeferred, Error: requestStopped}},
		{name: "steps published by the request: its claim goes with the last", rec: with(func(r *Record) { r.Unpublished, r.PublishError = []int{0}, publishingNow }),
			ev: Event{Kind: KindStepsPublished, Published: map[int]string{0: "11111111-1111-4111-8111-111111111111"}}, changed: true,
			events: []capsule.EventKind{EventStepStarted},
			check: func(t *testing.T, r *Record, _ []capsule.Event) {
				require.Empty(t, r.Unpublished)
				require.Empty(t, r.PublishError)
			}},

		{name: "step ended", rec: chain, ev: Event{Kind: KindStepEnded, Step: 0, CapsuleID: "11111111-1111-4111-8111-111111111111", CapsuleRun: 1,
			End: completed("artifact:x/1")}, changed: true, events: []capsule.EventKind{EventStepEnded},
			check: func(t *testing.T, r *Record, evs []capsule.Event) {
				require.Equal(t, completed("artifact:x/1"), r.Ended[0])
				require.Empty(t, r.State)
				require.Equal(t, 0, *evs[0].Step)
				require.Equal(t, "draft", evs[0].StepName)
				require.Equal(t, "artifact:x/1", evs[0].Artifact, "the step's result")
				require.Equal(t, machineAt, evs[0].At)
			}},
		{name: "step ended again: its event again, nothing written", rec: func() *Record {
			r := chain()
			ended(r, 0, completed("artifact:x/1"))
			return r
		}, ev: Event{Kind: KindStepEnded, Step: 0, CapsuleID: "11111111-1111-4111-8111-111111111111", CapsuleRun: 1, End: completed("artifact:x/1")},
			events: []capsule.EventKind{EventStepEnded}},
		{name: "the end of a capsule run replayed since", rec: func() *Record {
			r := chain()
			ended(r, 0, StepEnd{After: 1})
			return r
		}, ev: Event{Kind: KindStepEnded, Step: 0, CapsuleID: "11111111-1111-4111-8111-111111111111", CapsuleRun: 1, End: completed("a")}},
		{name: "step ended, not a step of the run", rec: chain, ev: Event{Kind: KindStepEnded, Step: 0, CapsuleID: "forged", CapsuleRun: 1, End: completed("a")}},
		{name: "step ended, out of range", rec: chain, ev: Event{Kind: KindStepEnded, Step: 7, CapsuleID: "x", CapsuleRun: 1}},
		{name: "the last step ended: the run ends", rec: func() *Record {
			r := chain()
			ended(r, 0, completed("a"))
			ended(r, 1, StepEnd{State: string(capsule.Halted), HaltReason: "executor_failed"})
			return r
		}, ev: Event{Kind: KindStepEnded, Step: 2, CapsuleID: "33333333-3333-4333-8333-333333333333", CapsuleRun: 1, End: completed("c")},
			changed: true, events: []capsule.EventKind{EventStepEnded},
			check: func(t *testing.T, r *Record, _ []capsule.Event) {
				require.Equal(t, StatePartial, r.State)
				require.Equal(t, machineAt, *r.EndedAt)
				require.True(t, EffectsOf(r).Outcome)
			}},
		{name: "a loop's verifier did not pass: round 2", rec: with(func(r *Record) { ended(r, 0, completed("artifact:draft1/1")) }),
			ev: Event{Kind: KindStepEnded, Step: 1, CapsuleID: "22222222-2222-4222-8222-222222222222", CapsuleRun: 1,
				End: StepEnd{State: string(capsule.Halted), HaltReason: "review_rejected"}},
			changed: true, events: []capsule.EventKind{EventStepEnded, EventRoundStarted},
			check: func(t *testing.T, r *Record, evs []capsule.Event) {
				l := r.Loops[0]
				require.Equal(t, 2, l.Round)
				require.Equal(t, 1, l.Rounds[0].Findings)
				require.True(t, l.Rounds[0].Ended)
				require.Equal(t, []int{0, 1}, r.Unpublished, "round 2 to publish")
				require.NotEqual(t, "11111111-1111-4111-8111-111111111111", r.Steps[0], "under fresh ids")
				require.Equal(t, l.Rounds[1].IDs, []string{r.Steps[0], r.Steps[1]})
				require.Equal(t, StepEnd{}, r.Ended[0])
				require.True(t, EffectsOf(r).Publish)
				require.Equal(t, 1, *evs[1].Step, "the loop's event names its verifier")
				require.Equal(t, "check", evs[1].StepName)
				require.Equal(t, 2, evs[1].Round)
				// Round 2's draft revises its own round-1 artifact.
				raw, _, err := buildRecorded(context.Background(), doc, r, 0, in.Verdict)
				require.NoError(t, err)
				var c capsule.Capsule
				require.NoError(t, json.Unmarshal(raw, &c))
				require.Equal(t, "artifact:11111111-1111-4111-8111-111111111111/1", c.Chain.PriorArtifact)
				require.Equal(t, []capsule.Finding{{Message: "cite a source"}}, c.Chain.Findings)
			}},
		{name: "a loop's verifier passed: the held step released", rec: func() *Record {
			r := base()
			ensureEnded(r)
			r.Steps[1] = "44444444-4444-4444-8444-444444444444"
			r.Loops[0].Rounds[0].IDs[1] = r.Steps[1]
			r.Ended[0] = completed("a")
			return r
		}, ev: Event{Kind: KindStepEnded, Step: 1, CapsuleID: "44444444-4444-4444-8444-444444444444", CapsuleRun: 1, End: completed("v")},
			changed: true, events: []capsule.EventKind{EventStepEnded, EventLoopEnded},
			check: func(t *testing.T, r *Record, _ []capsule.Event) {
				require.Equal(t, LoopPassed, r.Loops[0].State)
				require.Empty(t, r.Held)
				require.Equal(t, []int{2}, r.Unpublished)
			}},

		{name: "gate decided: accept a loop waiting for a person", rec: with(func(r *Record) {
			ended(r, 0, completed("a"))
			ended(r, 1, StepEnd{State: string(capsule.Halted)})
			r.Loops[0].State = LoopNoProgress
			r.State, r.By, r.Reason = StatePaused, capsule.BySagad, ReasonNoProgress
		}), ev: Event{Kind: KindGateDecided, Step: 1, Accept: true, By: "ann", Reason: "good enough"},
			changed: true, events: []capsule.EventKind{EventLoopEnded},
			check: func(t *testing.T, r *Record, _ []capsule.Event) {
				l := r.Loops[0]
				require.Equal(t, LoopAccepted, l.State)
				require.Equal(t, "ann", l.By)
				require.Empty(t, r.State, "running again")
				require.Equal(t, []int{2}, r.Unpublished)
			}},
		{name: "gate decided: reject", rec: with(func(r *Record) {
			ended(r, 0, completed("a"))
			ended(r, 1, StepEnd{State: string(capsule.Halted)})
			r.Loops[0].State = LoopNoProgress
		}), ev: Event{Kind: KindGateDecided, Step: 1, By: "ann", Reason: "no"},
			changed: true, events: []capsule.EventKind{EventLoopEnded},
			check: func(t *testing.T, r *Record, _ []capsule.Event) {
				require.Equal(t, LoopRejected, r.Loops[0].State)
				require.Equal(t, string(capsule.Halted), r.Ended[2].State, "the step after never starts")
				require.Equal(t, StatePartial, r.State)
			}},
		{name: "gate decided: the same answer again", rec: with(func(r *Record) { r.Loops[0].State = LoopAccepted }),
			ev: Event{Kind: KindGateDecided, Step: 1, Accept: true}},
		{name: "gate decided on a loop not waiting", rec: base, ev: Event{Kind: KindGateDecided, Step: 1, Accept: true}, err: ErrNotGated},
		{name: "gate decided on no verifier", rec: base, ev: Event{Kind: KindGateDecided, Step: 0, Accept: true}, err: ErrNotGated},

		{name: "paused", rec: base, ev: Event{Kind: KindPaused, By: "ann", Reason: "lunch"}, changed: true,
			check: func(t *testing.T, r *Record, _ []capsule.Event) {
				require.Equal(t, StatePaused, r.State)
				require.Equal(t, "ann", r.By)
				require.False(t, EffectsOf(r).Publish)
			}},
		{name: "paused again", rec: with(func(r *Record) { r.State = StatePaused }), ev: Event{Kind: KindPaused}},
		{name: "paused while a loop waits", rec: with(func(r *Record) { r.Loops[0].State = LoopNoProgress }),
			ev: Event{Kind: KindPaused}, err: ErrLoopWaits},
		{name: "paused once cancelled", rec: with(func(r *Record) { r.State = StateCancelled }), ev: Event{Kind: KindPaused}, err: ErrEnded},
		{name: "resumed", rec: with(func(r *Record) { r.State = StatePaused }), ev: Event{Kind: KindResumed, By: "bo"}, changed: true,
			check: func(t *testing.T, r *Record, _ []capsule.Event) {
				require.Empty(t, r.State)
				require.Equal(t, "bo", r.By)
			}},
		{name: "resumed, running", rec: base, ev: Event{Kind: KindResumed}},

		{name: "cancelled", rec: with(func(r *Record) { r.Unpublished = []int{0} }), ev: Event{Kind: KindCancelled, By: "ann", Reason: "wrong"},
			changed: true, check: func(t *testing.T, r *Record, _ []capsule.Event) {
				require.Equal(t, StateCancelled, r.State)
				require.Empty(t, r.Held)
				require.Empty(t, r.Unpublished)
				require.True(t, cancelledUnpublished(r, 0))
				require.True(t, cancelledUnpublished(r, 2), "the held step ends cancelled")
				require.False(t, cancelledUnpublished(r, 1))
			}},
		{name: "cancelled again", rec: with(func(r *Record) { r.State = StateCancelled }), ev: Event{Kind: KindCancelled}},
		{name: "cancelled once ended", rec: func() *Record {
			r := chain()
			for i := range 3 {
				ended(r, i, completed("a"))
			}
			r.State = StateCompleted
			return r
		}, ev: Event{Kind: KindCancelled}, err: ErrEnded},

		{name: "replayed", rec: func() *Record {
			r := chain()
			ended(r, 0, completed("a"))
			ended(r, 1, StepEnd{State: string(capsule.Halted)})
			ended(r, 2, StepEnd{State: string(capsule.Halted)})
			r.State, r.OutcomeSent = StatePartial, true
			return r
		}, ev: Event{Kind: KindReplayed, Runs: map[int]int{1: 1, 2: 1}, By: "ann"}, changed: true,
			check: func(t *testing.T, r *Record, _ []capsule.Event) {
				require.Equal(t, 1, r.Replays)
				require.Equal(t, StepEnd{After: 1}, r.Ended[1])
				require.Equal(t, completed("a"), r.Ended[0])
				require.Empty(t, r.State)
				require.False(t, r.OutcomeSent)
			}},
		{name: "replayed while running", rec: chain, ev: Event{Kind: KindReplayed, Runs: map[int]int{0: 1}}, err: ErrNotEnded},
		{name: "replayed, completed", rec: func() *Record {
			r := chain()
			for i := range 3 {
				ended(r, i, completed("a"))
			}
			r.State = StateCompleted
			return r
		}, ev: Event{Kind: KindReplayed, Runs: map[int]int{}}, err: ErrEnded},

		{name: "ended: the outcome sent", rec: with(func(r *Record) { r.State = StateFailed }), ev: Event{Kind: KindEnded}, changed: true,
			check: func(t *testing.T, r *Record, _ []capsule.Event) { require.True(t, r.OutcomeSent) }},
		{name: "ended again", rec: with(func(r *Record) { r.OutcomeSent = true }), ev: Event{Kind: KindEnded}},
	}
	for _, k := range Kinds {
		require.True(t, slices.ContainsFunc(rows, func(r row) bool { return r.ev.Kind == k }), "no row for kind %s", k)
	}
	for _, tt := range rows {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := tt.rec()
			var before []byte
			if rec != nil {
				before, _ = json.Marshal(rec)
			}
			tt.ev.At = machineAt
			res, err := Transition(context.Background(), rec, tt.ev, in)
			if rec != nil {
				after, _ := json.Marshal(rec)
				require.JSONEq(t, string(before), string(after), "the record given is not changed")
			}
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.changed, res.Changed)
			var kinds []capsule.EventKind
			for _, ev := range res.Events {
				kinds = append(kinds, ev.Kind)
				require.NotEmpty(t, ev.ID)
				require.Equal(t, EventKey("m", "p"), ev.Key)
			}
			require.Equal(t, tt.events, kinds)
			if tt.check != nil {
				tt.check(t, res.Record, res.Events)
			}
		})
	}
}
