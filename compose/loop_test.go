package compose_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v5"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/rules"
	"github.com/sagad/sagad/store"
)

// verifierID is the test's scripted verifier: in round r of a loop it
// approves, or rejects with metadata.verifier.findings[r-1] findings when
// that is more than 0.
const verifierID = "verifier"

type verifier struct{}

func (verifier) Review(_ context.Context, req executors.ReviewRequest) (executors.ReviewResult, error) {
	var meta struct {
		Verifier struct {
			Findings []int `json:"findings"`
		} `json:"verifier"`
	}
	_ = json.Unmarshal(req.Capsule.Metadata, &meta)
	round := 1
	if req.Capsule.Chain != nil {
		round = max(req.Capsule.Chain.Round, 1)
	}
	n := 0
	if round <= len(meta.Verifier.Findings) {
		n = meta.Verifier.Findings[round-1]
	}
	if n == 0 {
		return executors.ReviewResult{Verdict: capsule.Approved}, nil
	}
	res := executors.ReviewResult{Verdict: capsule.Rejected}
	for i := range n {
		res.Findings = append(res.Findings, capsule.Finding{Field: "target", Message: fmt.Sprintf("round %d finding %d", round, i+1)})
	}
	return res, nil
}

// looped is draft → check → publish, draft and check a loop.
var looped = []step{
	{name: "draft", kind: "produce"},
	{name: "check", kind: "validate", needs: []string{"draft"}},
	{name: "publish", kind: "translate", needs: []string{"check"}},
}

// loopDoc is looped with check verifying draft for at most maxRounds
// rounds, finding findings[r-1] in round r.
func (f *fixture) loopDoc(t *testing.T, id string, maxRounds int, findings ...int) []byte {
	t.Helper()
	var doc map[string]any
	require.NoError(t, json.Unmarshal(f.compositionDoc(t, id, looped, map[string]any{
		"loops": []any{map[string]any{"steps": []string{"draft"}, "verifier": "check", "max_rounds": maxRounds}},
	}), &doc))
	check := doc["steps"].([]any)[1].(map[string]any)["capsule"].(map[string]any)
	check["review"].(map[string]any)["reviewer_agent_id"] = verifierID
	check["metadata"] = map[string]any{"verifier": map[string]any{"findings": findings}}
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	return b
}

// loopState waits until producer's run 1 of id has its loop in state.
func (f *fixture) loopState(t *testing.T, id, producer, state string) compose.Outcome {
	t.Helper()
	var o compose.Outcome
	seen := &lastSeen{"no record"}
	natstest.Eventually(t, 60*time.Second, 10*time.Millisecond, func() bool {
		rec, err := compose.GetRun(context.Background(), f.st, id, producer, 1)
		require.NoError(t, err)
		o = compose.Status(context.Background(), f.st, rec)
		b, _ := json.Marshal(o)
		seen.s = string(b)
		return len(o.Loops) == 1 && o.Loops[0].State == state
	}, "the loop of %s never became %s: last seen %s", id, state, seen)
	return o
}

// TestCompositionLoopPasses: the verifier rejects round 1 with two
// findings; round 2 runs draft and check again under fresh ids, draft's
// cycle 1 addressing the verifier's findings first (source verifier) and
// reading its artifact; check approves, so the loop passes and the step
// after it, held until then, starts on round 2's check. The run
// completes with one outcome. The round-1 verifier's end delivered again
// starts no extra round.
func TestCompositionLoopPasses(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	r, err := f.composeAs(t, "alice", f.loopDoc(t, "loop-ok", 3, 2))
	require.NoError(t, err)
	require.Equal(t, compose.StepHeld, r.Steps[2].State, "the step after the loop waits for it, unpublished")
	draft1, check1, publish := r.Steps[0].CapsuleID, r.Steps[1].CapsuleID, r.Steps[2].CapsuleID

	rec := f.runEnded(t, "loop-ok", "alice", 1)
	o := compose.Manifest(rec)
	require.Equal(t, compose.StateCompleted, o.State)
	require.Equal(t, compose.Summary{Total: 3, Passed: 3}, o.Summary)
	l := o.Loops[0]
	require.Equal(t, compose.LoopPassed, l.State)
	require.Equal(t, 2, l.Round)
	require.Equal(t, []string{"draft"}, l.Steps)
	require.Equal(t, "check", l.Verifier)
	require.Equal(t, []string{draft1, check1}, l.Rounds[0].CapsuleIDs)
	require.Equal(t, 2, l.Rounds[0].Findings)
	require.False(t, l.Rounds[0].Passed)
	require.True(t, l.Rounds[1].Passed)
	require.NotNil(t, l.Rounds[0].Spend)
	require.Positive(t, l.Rounds[0].Spend.Tokens, "a past round's spend is kept")
	draft2, check2 := l.Rounds[1].CapsuleIDs[0], l.Rounds[1].CapsuleIDs[1]
	require.NotContains(t, []string{draft1, check1}, draft2)
	require.Equal(t, draft2, o.Steps[0].CapsuleID, "the manifest points at the newest round")
	require.Equal(t, check2, o.Steps[1].CapsuleID)
	requireStatusSchema(t, o)

	fs := f.rec.findingsOf(draft2)
	require.Len(t, fs, 2)
	for i, fd := range fs {
		require.Equal(t, capsule.FindingSourceVerifier, fd.Source)
		require.Equal(t, fmt.Sprintf("round 1 finding %d", i+1), fd.Message)
	}
	require.Empty(t, f.rec.findingsOf(draft1), "round 1 addresses nothing")
	require.Contains(t, capsuleIDs(f.rec.inputsOf(draft2)), check1, "round 2 reads the verifier's artifact")
	require.Nil(t, f.rec.priorOf(draft1), "round 1 revises nothing")
	cp1, _, err := f.st.Checkpoints.Get(ctx, draft1)
	require.NoError(t, err)
	own := cp1.State.ArtifactRefs[len(cp1.State.ArtifactRefs)-1]
	raw2, _, err := f.st.Raw(ctx, draft2)
	require.NoError(t, err)
	var c2 capsule.Capsule
	require.NoError(t, json.Unmarshal(raw2, &c2))
	require.Equal(t, own, c2.Chain.PriorArtifact, "round 2's capsule names round 1's own artifact")
	prior := f.rec.priorOf(draft2)
	require.NotNil(t, prior, "round 2's request carries round 1's own artifact")
	require.Equal(t, own, prior.Ref)
	want, err := f.st.Artifacts.Get(ctx, own)
	require.NoError(t, err)
	require.JSONEq(t, string(want.Content), string(prior.Content), "its bytes reach the executor")
	require.Nil(t, f.rec.priorOf(check2), "the verifier revises nothing of its own")
	require.Equal(t, []string{check2}, capsuleIDs(f.rec.inputsOf(publish)), "the step after the loop reads the last round")
	require.Equal(t, []string{draft2}, capsuleIDs(f.rec.inputsOf(check2)))

	kinds := f.events(t, "loop-ok", "alice")
	require.Contains(t, kinds, compose.EventRoundStarted)
	require.Contains(t, kinds, compose.EventLoopEnded)
	require.Len(t, f.outcomes(t, "loop-ok"), 1)

	// The round-1 verifier's end again, twice: no round 3, nothing new.
	raw, _, err := f.st.Raw(ctx, check1)
	require.NoError(t, err)
	for range 2 {
		require.NoError(t, f.runner.StepEnded(ctx, raw, check1))
	}
	again, err := compose.GetRun(ctx, f.st, "loop-ok", "alice", 1)
	require.NoError(t, err)
	require.Equal(t, rec, again)
	require.Len(t, f.outcomes(t, "loop-ok"), 1)

	// A crash after round 2 was recorded, before it was known published:
	// a past round's end delivered again publishes it (the same bytes,
	// which the intake drops) and records it published.
	_, err = compose.UpdateRecord(ctx, f.st, "loop-ok", "alice", 1, func(r *compose.Record) error {
		r.Unpublished = []int{0, 1}
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, f.runner.StepEnded(ctx, raw, check1))
	again, err = compose.GetRun(ctx, f.st, "loop-ok", "alice", 1)
	require.NoError(t, err)
	require.Empty(t, again.Unpublished)
	cp, _, err := f.st.Checkpoints.Get(ctx, draft2)
	require.NoError(t, err)
	require.Equal(t, 1, cp.RunNumber(), "published again, not run again")

	// The same document again is the run it made, named by round 1.
	r2, err := f.composeAs(t, "alice", f.loopDoc(t, "loop-ok", 3, 2))
	require.NoError(t, err)
	require.False(t, r2.Created)
	require.Equal(t, draft1, r2.Steps[0].CapsuleID)
	require.Equal(t, publish, r2.Steps[2].CapsuleID)
	for _, s := range r2.Steps {
		require.NotEqual(t, compose.StepForeign, s.State, s.Name)
	}
}

func (r *recorder) priorOf(id string) *capsule.Artifact {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.priors[id]
}

func (r *recorder) findingsOf(id string) []capsule.Finding {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.findings[id]
}

// requireStatusSchema checks o against the admin reply schema of
// `sagactl composition status` (and of the run's outcome).
func requireStatusSchema(t *testing.T, o compose.Outcome) {
	t.Helper()
	requireAdminSchema(t, "composition-status-reply", o)
}

// requireAdminSchema checks v against the admin schema name.
func requireAdminSchema(t *testing.T, name string, o any) {
	t.Helper()
	url := "https://sagad.dev/schemas/admin/" + name + ".schema.json"
	b, err := os.ReadFile("../schemas/admin/" + name + ".schema.json")
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	require.NoError(t, c.AddResource(url, strings.NewReader(string(b))))
	s, err := c.Compile(url)
	require.NoError(t, err)
	body, err := json.Marshal(o)
	require.NoError(t, err)
	var v any
	require.NoError(t, json.Unmarshal(body, &v))
	require.NoError(t, s.Validate(v), "%s", body)
}

func capsuleIDs(as []capsule.Artifact) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.CapsuleID)
	}
	return out
}

// TestCompositionLoopNoProgress: findings 2, 2, 3: round 2 and round 3
// each found no fewer than the round before, so after round 3 (of 5) the
// loop stops, the run paused for no_progress and the step after the loop
// held; resuming is refused, a person decides on the verifier. Accepted,
// the step after starts on round 3's verifier artifact and the run ends
// partial (the verifier did not pass); rejected, the step after never
// starts.
func TestCompositionLoopNoProgress(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	for _, accept := range []bool{true, false} {
		id := fmt.Sprintf("loop-stuck-%v", accept)
		r, err := f.composeAs(t, "alice", f.loopDoc(t, id, 5, 2, 2, 3, 1))
		require.NoError(t, err)
		publish := r.Steps[2].CapsuleID
		o := f.loopState(t, id, "alice", compose.LoopNoProgress)
		require.Equal(t, compose.StatePaused, o.State)
		require.Equal(t, compose.ReasonNoProgress, o.Reason)
		require.Equal(t, 3, o.Loops[0].Round)
		var counts []int
		for _, rd := range o.Loops[0].Rounds {
			counts = append(counts, rd.Findings)
		}
		require.Equal(t, []int{2, 2, 3}, counts)
		require.Equal(t, compose.StepHeld, o.Steps[2].State)
		requireStatusSchema(t, o)
		waiting, err := compose.Waiting(ctx, f.st, 100)
		require.NoError(t, err)
		require.Len(t, waiting, 1, "pending lists the loop waiting for a person")
		require.Equal(t, compose.WaitingLoop{CompositionID: id, Producer: "alice", Run: 1, Verifier: "check",
			CapsuleID: o.Steps[1].CapsuleID, Round: 3, Findings: []int{2, 2, 3}, Since: waiting[0].Since}, waiting[0])
		requireAdminSchema(t, "pending-reply", map[string]any{"items": []any{}, "compositions": waiting})
		_, _, err = f.st.Checkpoints.Get(ctx, publish)
		require.ErrorIs(t, err, store.ErrNotFound, "the step after the loop was never published")

		rec, err := compose.GetRun(ctx, f.st, id, "alice", 1)
		require.NoError(t, err)
		_, err = compose.Resume(ctx, f.st, func(context.Context, string, string, string) error { return nil }, rec, "ops", "go on")
		require.ErrorIs(t, err, compose.ErrLoopWaits)
		require.ErrorIs(t, f.decide(ctx, id, "alice", "draft", accept), compose.ErrNotGated, "only the verifier decides a loop")
		require.NoError(t, f.decide(ctx, id, "alice", "check", accept))
		// The same answer again finishes what a crash may have interrupted
		// (or finds the run ended); the other answer is refused.
		if err := f.decide(ctx, id, "alice", "check", accept); err != nil {
			require.ErrorIs(t, err, compose.ErrEnded)
		}
		require.Error(t, f.decide(ctx, id, "alice", "check", !accept), "decided already")

		rec = f.runEnded(t, id, "alice", 1)
		waiting, err = compose.Waiting(ctx, f.st, 100)
		require.NoError(t, err)
		require.Empty(t, waiting, "decided, nothing waits")
		m := compose.Manifest(rec)
		require.Equal(t, compose.StatePartial, m.State)
		require.Equal(t, "ops", m.Loops[0].By)
		check3 := m.Loops[0].Rounds[2].CapsuleIDs[1]
		if accept {
			require.Equal(t, compose.LoopAccepted, m.Loops[0].State)
			require.Equal(t, string(capsule.Completed), m.Steps[2].State)
			require.Equal(t, []string{check3}, capsuleIDs(f.rec.inputsOf(publish)), "accepted, the step after reads the last round")
			require.Equal(t, compose.Summary{Total: 3, Passed: 2, Failed: 1, ExitCode: 12}, m.Summary)
		} else {
			require.Equal(t, compose.LoopRejected, m.Loops[0].State)
			require.Equal(t, string(capsule.Halted), m.Steps[2].State)
			require.Equal(t, capsule.DependencyFailed(check3).String(), m.Steps[2].HaltReason)
			require.Nil(t, f.rec.inputsOf(publish), "rejected, the step after never ran")
			require.Equal(t, compose.Summary{Total: 3, Passed: 1, Failed: 2, ExitCode: 12}, m.Summary)
		}
		require.Len(t, f.outcomes(t, id), 1)
	}
}

// TestCompositionLoopMaxRounds: findings 3 then 2 with max_rounds 2: the
// loop fails after round 2, the step after it never starts (halted
// dependency_failed on the last verifier, never published), and the run
// ends partial with one outcome.
func TestCompositionLoopMaxRounds(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r, err := f.composeAs(t, "alice", f.loopDoc(t, "loop-max", 2, 3, 2))
	require.NoError(t, err)
	publish := r.Steps[2].CapsuleID
	rec := f.runEnded(t, "loop-max", "alice", 1)
	m := compose.Manifest(rec)
	require.Equal(t, compose.StatePartial, m.State)
	require.Equal(t, compose.LoopFailed, m.Loops[0].State)
	require.Equal(t, 2, m.Loops[0].Round)
	require.Equal(t, 2, m.Loops[0].Rounds[1].Findings)
	require.Equal(t, capsule.DependencyFailed(m.Loops[0].Rounds[1].CapsuleIDs[1]).String(), m.Steps[2].HaltReason)
	_, _, err = f.st.Checkpoints.Get(context.Background(), publish)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Len(t, f.outcomes(t, "loop-max"), 1)
}

// TestCompositionLoopUpstreamFailed: a step the loop needs from outside
// it fails, so round 1 fails without the loop's fault: no round 2 (it
// would fail the same way), the loop fails and the run with it.
func TestCompositionLoopUpstreamFailed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	steps := []step{
		{name: "pre", kind: "produce"},
		{name: "draft", kind: "produce", needs: []string{"pre"}},
		{name: "check", kind: "validate", needs: []string{"draft"}},
	}
	f.rec.mu.Lock()
	f.rec.fail["pre"] = true
	f.rec.mu.Unlock()
	_, err := f.composeAs(t, "alice", f.compositionDoc(t, "loop-up", steps, map[string]any{
		"loops": []any{map[string]any{"steps": []string{"draft"}, "verifier": "check", "max_rounds": 5}},
	}))
	require.NoError(t, err)
	m := compose.Manifest(f.runEnded(t, "loop-up", "alice", 1))
	require.Equal(t, compose.StateFailed, m.State)
	require.Equal(t, compose.LoopFailed, m.Loops[0].State)
	require.Equal(t, 1, m.Loops[0].Round)
}

// TestCompositionLoopPausedRound: a round that ends while a person has
// paused the run is recorded but not published until the run is resumed;
// a gated verifier waits for its person in every round.
func TestCompositionLoopPausedRound(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	var doc map[string]any
	require.NoError(t, json.Unmarshal(f.loopDoc(t, "loop-pause", 3, 1), &doc))
	doc["steps"].([]any)[1].(map[string]any)["gate"] = compose.GateOperator
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	r, err := f.composeAs(t, "alice", b)
	require.NoError(t, err)
	f.heldAtGate(t, r.Steps[1].CapsuleID)
	alice := "alice"
	rec, err := compose.Find(ctx, f.st, "loop-pause", &alice, 0)
	require.NoError(t, err)
	_, err = compose.Pause(ctx, f.st, func(ctx context.Context, id, reason, by string) error {
		_, err := f.admin.Pause(ctx, id, reason, by)
		return err
	}, rec, "ops", "hold")
	require.NoError(t, err)
	require.NoError(t, f.decide(ctx, "loop-pause", "alice", "check", true))

	natstest.Eventually(t, 60*time.Second, 10*time.Millisecond, func() bool {
		rec, err = compose.GetRun(ctx, f.st, "loop-pause", "alice", 1)
		require.NoError(t, err)
		return rec.Loops[0].Round == 2
	}, "round 2 was never recorded")
	require.Equal(t, []int{0, 1}, rec.Unpublished, "recorded, held while the run is paused")
	_, _, err = f.st.Checkpoints.Get(ctx, rec.Steps[0])
	require.ErrorIs(t, err, store.ErrNotFound)

	_, err = compose.Resume(ctx, f.st, func(ctx context.Context, id, reason, by string) error {
		_, err := f.admin.Resume(ctx, id, admin.ResumeOptions{By: by, Reason: reason})
		return err
	}, rec, "ops", "go")
	require.NoError(t, err)
	f.heldAtGate(t, rec.Steps[1])
	require.NoError(t, f.decide(ctx, "loop-pause", "alice", "check", true))
	m := compose.Manifest(f.runEnded(t, "loop-pause", "alice", 1))
	require.Equal(t, compose.StateCompleted, m.State)
	require.Equal(t, compose.LoopPassed, m.Loops[0].State)
}

// TestCompositionLoopCancel: cancelling a run whose loop waits for a
// person ends it cancelled at once, the held step with it.
func TestCompositionLoopCancel(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	_, err := f.composeAs(t, "alice", f.loopDoc(t, "loop-cancel", 4, 1, 1, 1))
	require.NoError(t, err)
	f.loopState(t, "loop-cancel", "alice", compose.LoopNoProgress)
	rec, err := compose.GetRun(ctx, f.st, "loop-cancel", "alice", 1)
	require.NoError(t, err)
	_, err = compose.Cancel(ctx, f.st, func(ctx context.Context, id, reason, by string) error {
		_, err := f.admin.Cancel(ctx, id, reason, by)
		return err
	}, rec, "ops", "enough")
	require.NoError(t, err)
	rec = f.runEnded(t, "loop-cancel", "alice", 1)
	m := compose.Manifest(rec)
	require.Equal(t, compose.StateCancelled, m.State)
	require.Equal(t, string(capsule.Cancelled), m.Steps[2].State)
	require.Len(t, f.outcomes(t, "loop-cancel"), 1)
	_, err = compose.Replay(ctx, f.st, func(ctx context.Context, id, reason, by string) error {
		_, err := f.admin.Replay(ctx, id, admin.ReplayOptions{By: by, Reason: reason, Dependents: true})
		return err
	}, rec, "ops", "again")
	require.ErrorIs(t, err, compose.ErrLoopReplay)
}

// TestCompositionLoopCheck: a loop names steps of the document, its
// verifier needs every loop step, a step between them is in the loop, a
// step is in one loop at most, a loop step fits in its later rounds too;
// each problem is a finding, and a sound loop is none.
func TestCompositionLoopCheck(t *testing.T) {
	t.Parallel()
	f := &fixture{workspace: t.TempDir()}
	steps := []step{
		{name: "a", kind: "produce"},
		{name: "b", kind: "produce", needs: []string{"a"}},
		{name: "v", kind: "validate", needs: []string{"b"}},
		{name: "x", kind: "produce"},
		{name: "w", kind: "validate", needs: []string{"v"}},
	}
	cfg := rules.Config{ExecutorKinds: []string{"produce", "validate"}}
	for _, tc := range []struct {
		name  string
		loops []map[string]any
		want  []string // the fields of the findings
	}{
		{"sound", []map[string]any{{"steps": []string{"a", "b"}, "verifier": "v"}}, nil},
		{"two loops", []map[string]any{{"steps": []string{"a", "b"}, "verifier": "v"}, {"steps": []string{"x"}, "verifier": "w"}}, []string{"loops[1].steps"}},
		{"unknown verifier", []map[string]any{{"steps": []string{"a"}, "verifier": "zz"}}, []string{"loops[0].verifier"}},
		{"unknown step", []map[string]any{{"steps": []string{"zz"}, "verifier": "v"}}, []string{"loops[0].steps[0]"}},
		{"not verified", []map[string]any{{"steps": []string{"x"}, "verifier": "v"}}, []string{"loops[0].steps"}},
		{"between", []map[string]any{{"steps": []string{"a"}, "verifier": "v"}}, []string{"loops[0].steps"}},
		{"verifier a step", []map[string]any{{"steps": []string{"b", "v"}, "verifier": "v"}}, []string{"loops[0].steps"}},
		{"twice", []map[string]any{{"steps": []string{"b"}, "verifier": "v"}, {"steps": []string{"b"}, "verifier": "w"}}, []string{"loops[1]", "loops[1].steps"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, l := range tc.loops {
				l["max_rounds"] = 3
			}
			d, err := compose.Parse(f.compositionDoc(t, "chk", steps, map[string]any{"loops": tc.loops}))
			require.NoError(t, err)
			var fields []string
			for _, fd := range compose.Check(d, cfg, time.Now()) {
				fields = append(fields, fd.Field)
			}
			slices.Sort(fields)
			require.Equal(t, tc.want, fields)
		})
	}
	// A step that fits in round 1 but not with a later round's findings is
	// refused before anything starts.
	d, err := compose.Parse(f.compositionDoc(t, "chk", steps, map[string]any{
		"loops": []any{map[string]any{"steps": []string{"a", "b"}, "verifier": "v", "max_rounds": 3}},
	}))
	require.NoError(t, err)
	small := cfg
	small.MaxCapsuleBytes = 16 << 10
	fs := compose.Check(d, small, time.Now())
	require.Len(t, fs, 2, "%v", fs)
	for _, fd := range fs {
		require.Contains(t, []string{"a", "b"}, fd.Name)
		require.Contains(t, fd.Message, "in a later round")
	}

	_, err = compose.Parse(f.compositionDoc(t, "chk", steps, map[string]any{
		"loops": []any{map[string]any{"steps": []string{"a"}, "verifier": "b", "max_rounds": compose.MaxRounds + 1}},
	}))
	var de *compose.DocError
	require.ErrorAs(t, err, &de)
	require.True(t, strings.Contains(de.Error(), "max_rounds"), de.Error())
}

// TestRecordSize256Loop: the largest loop a record holds, one of 255
// steps and a verifier at its 10th round, every round's capsule ids kept:
// still far below the KV value limit.
func TestRecordSize256Loop(t *testing.T) {
	t.Parallel()
	ids, err := compose.NewStepIDs(compose.MaxSteps)
	require.NoError(t, err)
	now := time.Now().UTC()
	rec := compose.Record{CompositionID: "a-composition-id-of-forty-characters-xyz", Producer: "producer-name", Digest: strings.Repeat("d", 64),
		Steps: ids, CreatedAt: now, Run: 7, State: compose.StatePartial, OutcomeSent: true, EndedAt: &now}
	loop := compose.LoopRun{MaxRounds: compose.MaxRounds, Round: compose.MaxRounds, State: compose.LoopFailed}
	for i, id := range ids {
		rec.StepDigests = append(rec.StepDigests, strings.Repeat("e", 64))
		rec.Names = append(rec.Names, fmt.Sprintf("translate-into-%03d", i))
		var needs []int
		if i > 0 {
			needs = []int{0, i - 1}
		}
		rec.Needs = append(rec.Needs, needs)
		rec.Ended = append(rec.Ended, compose.StepEnd{State: string(capsule.Completed), Artifact: "artifact:" + id + "/cycle-3",
			Tokens: 123456, Dollars: 12.3456})
		loop.Steps = append(loop.Steps, i)
	}
	for range compose.MaxRounds {
		round, err := compose.NewStepIDs(compose.MaxSteps)
		require.NoError(t, err)
		loop.Rounds = append(loop.Rounds, compose.LoopRound{IDs: round, Ended: true, Findings: 100})
	}
	rec.Loops = []compose.LoopRun{loop}
	b, err := json.Marshal(rec)
	require.NoError(t, err)
	t.Logf("a 256-step record with a 256-step loop at round 10: %d bytes", len(b))
	require.Less(t, len(b), 256<<10)
	_, err = compose.DecodeRecord(b)
	require.NoError(t, err)
	requireStatusSchema(t, compose.Manifest(&rec))
}

// TestCompositionHeldStepCannotBeClaimed plays a producer that claims the
// step held after its own verification loop, whose capsule id the
// compose reply names, before the loop passes: its capsule declares the
// step's membership under the step's id. It is refused (the step is
// held; and its bytes are not the ones sagad recorded), never takes the
// id, and the step runs once the loop passed, as sagad built it: the
// verification cannot be skipped by publishing what comes after it.
func TestCompositionHeldStepCannotBeClaimed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	r, err := f.composeAs(t, "alice", f.loopDoc(t, "loop-claim", 3, 2))
	require.NoError(t, err)
	require.Equal(t, compose.StepHeld, r.Steps[2].State)
	held := r.Steps[2].CapsuleID

	claim := capsuletest.New().Set("capsule_id", held).Set("task.kind", "translate").
		Set("task.title", "published before the loop passed").
		Set("chain", map[string]any{"id": "loop-claim", "step": 2}).Sealed(t)
	var claimed capsule.Capsule
	require.NoError(t, json.Unmarshal(claim, &claimed))
	key := f.publishAs(t, "alice", claim)
	natstest.Eventually(t, 60*time.Second, 10*time.Millisecond, func() bool {
		_, _, err := f.st.Checkpoints.Get(ctx, key)
		if err == nil {
			return true
		}
		got, _, err := f.st.Checkpoints.Get(ctx, held)
		require.False(t, err == nil && got.Digest == claimed.Integrity.SHA256, "the claim was received as the held step")
		return false
	}, "the claim was never received")
	cp := f.ended(t, key)
	require.Equal(t, capsule.Halted, cp.State.Status)
	require.Equal(t, capsule.ChainMembershipRefused("loop-claim", 2).String(), cp.State.HaltReason)

	rec := f.runEnded(t, "loop-claim", "alice", 1)
	require.Equal(t, compose.StateCompleted, compose.Manifest(rec).State)
	got, _, err := f.st.Checkpoints.Get(ctx, held)
	require.NoError(t, err)
	require.Equal(t, rec.StepDigests[2], got.Digest, "the held step ran as sagad built it")
	require.Equal(t, capsule.Completed, got.State.Status)
}
