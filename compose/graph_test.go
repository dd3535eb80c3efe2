package compose_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/rules"
)

// step is one step of a composition document in a test.
type step struct {
	name, kind string
	needs      []string
}

// compositionDoc is a composition of steps, each a capsule template of
// its kind with a target file of its own.
func (f *fixture) compositionDoc(t *testing.T, id string, steps []step, extra map[string]any) []byte {
	t.Helper()
	at := time.Now().UTC().Truncate(time.Hour)
	var out []any
	for _, s := range steps {
		name := id + "-" + s.name + ".txt"
		require.NoError(t, os.WriteFile(filepath.Join(f.workspace, name), []byte("x"), 0o644))
		tmpl := capsuletest.New().Delete("capsule_id").Set("task.kind", s.kind).
			Set("task.title", s.name).Set("target", "file:"+name).
			Set("constraints.resource_locks_required", []any{name}).
			Set("created_at", at.Format(time.RFC3339)).Set("deadline", at.Add(3*time.Hour).Format(time.RFC3339)).
			Set("spec.approved_at", at.Add(-time.Minute).Format(time.RFC3339))
		st := map[string]any{"name": s.name, "capsule": map[string]any(tmpl)}
		if len(s.needs) > 0 {
			st["needs"] = s.needs
		}
		out = append(out, st)
	}
	doc := map[string]any{"composition_id": id, "steps": out}
	for k, v := range extra {
		doc[k] = v
	}
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	return b
}

var fanOutFanIn = []step{
	{name: "draft", kind: "produce"},
	{name: "fr", kind: "translate", needs: []string{"draft"}},
	{name: "de", kind: "translate", needs: []string{"draft"}},
	{name: "es", kind: "translate", needs: []string{"draft"}},
	{name: "merge", kind: "validate", needs: []string{"fr", "de", "es"}},
}

// TestCompositionFanOutFanIn: one draft, three translations that each read
// it, a merge that reads all three: every step completes, each translation
// gets the draft's final artifact, the merge every translation's.
func TestCompositionFanOutFanIn(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r, err := f.composeAs(t, "alice", f.compositionDoc(t, "fan", fanOutFanIn, nil))
	require.NoError(t, err)
	require.Equal(t, "fan", r.CompositionID)
	require.Equal(t, 1, r.Run)
	ids := map[string]string{}
	for i, s := range r.Steps {
		require.Equal(t, fanOutFanIn[i].name, s.Name)
		ids[s.Name] = s.CapsuleID
	}
	merge := f.ended(t, ids["merge"])
	require.Equal(t, capsule.Completed, merge.State.Status, merge.State.HaltReason)
	for _, s := range fanOutFanIn {
		cp := f.ended(t, ids[s.name])
		require.Equal(t, capsule.Completed, cp.State.Status, s.name)
		var from []string
		for _, a := range f.rec.inputsOf(ids[s.name]) {
			from = append(from, a.CapsuleID)
		}
		var want []string
		for _, n := range s.needs {
			want = append(want, ids[n])
		}
		require.ElementsMatch(t, want, from, "%s reads every need's final artifact", s.name)
	}
	// The run's manifest says each step's needs (sagactl's tree and the
	// console's graph are drawn from them), and the run was counted once.
	rec, err := compose.Get(context.Background(), f.st, "fan", "alice")
	require.NoError(t, err)
	for i, s := range compose.Status(context.Background(), f.st, rec).Steps {
		require.Equal(t, fanOutFanIn[i].needs, s.Needs, s.Name)
	}
	require.Equal(t, []int{len(fanOutFanIn)}, f.started())
}

// TestCompositionEditedIsNewRun: the same document again is the same run;
// an edited one under the same id is run 2, whose steps RECEPTION accepts
// as members and which complete.
func TestCompositionEditedIsNewRun(t *testing.T) {
	t.Parallel()
	f := setup(t)
	two := fanOutFanIn[:2]
	first, err := f.composeAs(t, "alice", f.compositionDoc(t, "edit", two, nil))
	require.NoError(t, err)
	again, err := f.composeAs(t, "alice", f.compositionDoc(t, "edit", two, nil))
	require.NoError(t, err)
	require.False(t, again.Created, "first %+v again %+v", first, again)
	require.Equal(t, first.Steps[1].CapsuleID, again.Steps[1].CapsuleID)

	edited := []step{two[0], {name: "fr", kind: "validate", needs: []string{"draft"}}}
	second, err := f.composeAs(t, "alice", f.compositionDoc(t, "edit", edited, nil))
	require.NoError(t, err)
	require.True(t, second.Created)
	require.Equal(t, 2, second.Run)
	for _, s := range append(first.Steps, second.Steps...) {
		cp := f.ended(t, s.CapsuleID)
		require.Equal(t, capsule.Completed, cp.State.Status, "%s: %s", s.Name, cp.State.HaltReason)
	}
}

// TestCompositionGraph: names are unique, needs name steps, no cycle; each
// problem is its step's finding.
func TestCompositionGraph(t *testing.T) {
	t.Parallel()
	tmpl := json.RawMessage(`{"task":{"kind":"produce"}}`)
	for _, tc := range []struct {
		name  string
		steps []map[string]any
		bad   []int
	}{
		{"duplicate", []map[string]any{{"name": "a"}, {"name": "a"}}, []int{1}},
		{"unknown need", []map[string]any{{"name": "a", "needs": []string{"zz"}}}, []int{0}},
		{"itself", []map[string]any{{"name": "a", "needs": []string{"a"}}}, []int{0}},
		{"cycle", []map[string]any{{"name": "a", "needs": []string{"c"}}, {"name": "b", "needs": []string{"a"}}, {"name": "c", "needs": []string{"b"}}, {"name": "d"}, {"name": "e", "needs": []string{"a"}}}, []int{0, 1, 2, 4}},
		{"diamond", []map[string]any{{"name": "a"}, {"name": "b", "needs": []string{"a"}}, {"name": "c", "needs": []string{"a"}}, {"name": "d", "needs": []string{"b", "c"}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, s := range tc.steps {
				s["capsule"] = tmpl
			}
			b, err := json.Marshal(map[string]any{"composition_id": "g", "steps": tc.steps})
			require.NoError(t, err)
			doc, err := compose.Parse(b)
			require.NoError(t, err)
			var bad []int
			for _, fd := range doc.Graph() {
				bad = append(bad, fd.Step)
			}
			require.Equal(t, tc.bad, bad)
		})
	}
}

// TestCompositionDeadlineBoundsSteps: a step's later deadline is brought
// forward to the composition's.
func TestCompositionDeadlineBoundsSteps(t *testing.T) {
	t.Parallel()
	f := &fixture{workspace: t.TempDir()}
	dl := time.Now().UTC().Add(time.Hour).Truncate(time.Second)
	doc, err := compose.Parse(f.compositionDoc(t, "dl", fanOutFanIn[:2], map[string]any{"deadline": dl.Format(time.RFC3339)}))
	require.NoError(t, err)
	ids, err := compose.NewStepIDs(2)
	require.NoError(t, err)
	raws, _, err := doc.Build(ids, 1)
	require.NoError(t, err)
	for _, raw := range raws {
		var c capsule.Capsule
		require.NoError(t, json.Unmarshal(raw, &c))
		require.True(t, c.Deadline.Equal(dl), "%v", c.Deadline)
	}
}

// TestCompositionBudget: the composition's budget is a wave of its run:
// a budget under one step's caps holds the first step waiting for a person
// (wave_too_small: it could never fit; nothing spent); raised, the steps run
// and complete, the whole spend charged to the wave.
func TestCompositionBudget(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	r, err := f.composeAs(t, "alice", f.compositionDoc(t, "budget", fanOutFanIn[:3], map[string]any{"budget": map[string]any{"tokens": 100}}))
	require.NoError(t, err)
	wave := compose.WaveID([]string{r.Steps[0].CapsuleID, r.Steps[1].CapsuleID, r.Steps[2].CapsuleID})
	natstest.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool {
		cp, _, err := f.st.Checkpoints.Get(ctx, r.Steps[0].CapsuleID)
		return err == nil && cp.State.Status == capsule.Waiting && cp.State.Pause != nil && cp.State.Pause.Trigger == capsule.TriggerWaveTooSmall
	}, "the first step waits for a person: the wave can never hold it")
	used, err := f.st.Budgets.Used(ctx, r.Steps[0].CapsuleID)
	require.NoError(t, err)
	require.Zero(t, used.Tokens)

	require.NoError(t, f.st.Budgets.SetWave(ctx, wave, 25000, 0, false))
	f.st.WaveChanged()
	t.Cleanup(func() {
		if t.Failed() {
			for _, s := range r.Steps {
				cp, _, _ := f.st.Checkpoints.Get(ctx, s.CapsuleID)
				if cp != nil {
					t.Logf("%s: %s %s %s %+v", s.Name, cp.State.Status, cp.State.PhaseName, cp.State.HaltReason, cp.State.Pause)
				}
			}
			w, _, _ := f.st.Budgets.Wave(ctx, wave)
			t.Logf("wave %+v", w)
		}
	})
	for _, s := range r.Steps {
		cp := f.ended(t, s.CapsuleID)
		require.Equal(t, capsule.Completed, cp.State.Status, "%s: %s", s.Name, cp.State.HaltReason)
	}
	var w budget.Wave
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		var ok bool
		var err error
		w, ok, err = f.st.Budgets.Wave(ctx, wave)
		require.NoError(t, err)
		return ok && w.Reserved.Tokens == 0
	}, "every reservation released")
	var spent int64
	for _, s := range r.Steps {
		cp, _, err := f.st.Checkpoints.Get(ctx, s.CapsuleID)
		require.NoError(t, err)
		spent += cp.State.BudgetUsed.Tokens
	}
	require.Equal(t, spent, w.Used.Tokens, "every step's spend is charged to the composition's wave")
}

// TestCompositionBudgetOwnWave: with a composition budget, a step may not
// name a wave of its own.
func TestCompositionBudgetOwnWave(t *testing.T) {
	t.Parallel()
	f := &fixture{workspace: t.TempDir()}
	var doc map[string]any
	require.NoError(t, json.Unmarshal(f.compositionDoc(t, "own", fanOutFanIn[:2], map[string]any{"budget": map[string]any{"dollars": 3}}), &doc))
	doc["steps"].([]any)[1].(map[string]any)["capsule"].(map[string]any)["wave_id"] = "mine"
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	d, err := compose.Parse(b)
	require.NoError(t, err)
	fs := compose.Check(d, rules.Config{ExecutorKinds: []string{"produce", "translate"}}, time.Now())
	require.NotEmpty(t, fs)
	require.Equal(t, 1, fs[0].Step)
	require.Equal(t, "wave_id", fs[0].Field)
}

// TestCompositionStepsShareALock: a run's steps are published at once, so a
// step's lock may be held when RECEPTION takes it — by the step it needs,
// by an earlier run of the document, or by anyone. It is not refused there
// (it would never own its id and the run would never end): it takes its
// locks at EXECUTION, waiting like any capsule, and the run completes.
func TestCompositionStepsShareALock(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(f.compositionDoc(t, "shared", fanOutFanIn[:2], nil), &doc))
	for _, s := range doc["steps"].([]any) {
		tmpl := s.(map[string]any)["capsule"].(map[string]any)
		tmpl["constraints"].(map[string]any)["resource_locks_required"] = []any{"shared-draft.txt"}
		tmpl["target"] = "file:shared-draft.txt" // both steps edit one file
	}
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	ctx := context.Background()
	// Someone else holds the lock while the run is composed and received.
	require.NoError(t, f.st.Locks.TryAcquire(ctx, "shared-draft.txt", "someone-else"))
	r, err := f.composeAs(t, "alice", b)
	require.NoError(t, err)
	for _, s := range r.Steps {
		require.NotEqual(t, compose.StepRefused, s.State, "%s: %s", s.Name, s.HaltReason)
	}
	require.NoError(t, f.st.Locks.Release(ctx, "shared-draft.txt", "someone-else"))
	for _, s := range r.Steps {
		cp := f.ended(t, s.CapsuleID)
		require.Equal(t, capsule.Completed, cp.State.Status, "%s: %s", s.Name, cp.State.HaltReason)
	}
}

// TestCompositionStepHaltedOnArrival: a step that RECEPTION halts although
// sagad checked it (here its deadline passed between the check, on a clock
// a day behind, and its arrival) ends under its own id: the run records
// its end, the step that needs it halts dependency_failed at once, and the
// run ends with one outcome instead of waiting for an id that would never
// have a checkpoint.
func TestCompositionStepHaltedOnArrival(t *testing.T) {
	t.Parallel()
	f := setup(t, func(c *compose.Config) {
		c.Now = func() time.Time { return time.Now().Add(-24 * time.Hour) }
	})
	steps := []step{{name: "draft", kind: "produce"}, {name: "fr", kind: "translate", needs: []string{"draft"}}, {name: "merge", kind: "validate", needs: []string{"fr"}}}
	var doc map[string]any
	require.NoError(t, json.Unmarshal(f.compositionDoc(t, "late", steps, nil), &doc))
	// Dates a day back, as the compose clock sees today; fr's deadline
	// is an hour ago for everyone else.
	back := time.Now().UTC().Add(-24 * time.Hour).Truncate(time.Hour)
	for i, s := range doc["steps"].([]any) {
		tmpl := s.(map[string]any)["capsule"].(map[string]any)
		tmpl["created_at"] = back.Format(time.RFC3339)
		tmpl["spec"].(map[string]any)["approved_at"] = back.Add(-time.Minute).Format(time.RFC3339)
		deadline := time.Now().UTC().Add(3 * time.Hour)
		if i == 1 {
			deadline = time.Now().UTC().Add(-time.Hour)
		}
		tmpl["deadline"] = deadline.Truncate(time.Second).Format(time.RFC3339)
	}
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	r, err := f.composeAs(t, "alice", b)
	require.NoError(t, err)
	require.Equal(t, compose.StepRefused, r.Steps[1].State)
	require.Equal(t, "deadline_in_past", r.Steps[1].HaltReason)

	fr := f.ended(t, r.Steps[1].CapsuleID)
	require.Equal(t, capsule.Halted, fr.State.Status)
	require.Equal(t, capsule.Reception, fr.State.Phase)
	merge := f.ended(t, r.Steps[2].CapsuleID)
	require.Equal(t, capsule.DependencyFailed(r.Steps[1].CapsuleID).String(), merge.State.HaltReason)
	rec := f.runEnded(t, "late", "alice", 1)
	m := compose.Manifest(rec)
	require.Equal(t, compose.StatePartial, m.State)
	require.Equal(t, "deadline_in_past", m.Steps[1].HaltReason)
	require.Len(t, f.outcomes(t, "late"), 1)
}
