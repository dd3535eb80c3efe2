package compose_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/rules"
	"github.com/sagad/sagad/store"
)

var gated = []step{
	{name: "draft", kind: "produce"},
	{name: "review", kind: "translate", needs: []string{"draft"}},
	{name: "publish", kind: "validate", needs: []string{"review"}},
}

// gatedDoc is draft → review → publish with review gated.
func (f *fixture) gatedDoc(t *testing.T, id string) []byte {
	t.Helper()
	var doc map[string]any
	require.NoError(t, json.Unmarshal(f.compositionDoc(t, id, gated, nil), &doc))
	doc["steps"].([]any)[1].(map[string]any)["gate"] = compose.GateOperator
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	return b
}

func (f *fixture) decide(ctx context.Context, id, producer, step string, accept bool) error {
	rec, err := compose.Find(ctx, f.st, id, &producer, 0)
	if err != nil {
		return err
	}
	_, err = compose.Decide(ctx, f.st, func(ctx context.Context, id, reason, by string) error {
		_, err := f.admin.Resume(ctx, id, admin.ResumeOptions{By: by, Reason: reason})
		return err
	}, func(ctx context.Context, id, reason, by string) error {
		_, err := f.admin.Decide(ctx, id, admin.DecisionReject, reason, by)
		return err
	}, rec, step, accept, "ops", "looked at the draft")
	return err
}

// heldAtGate waits until the capsule id waits at its operator gate.
func (f *fixture) heldAtGate(t *testing.T, id string) *capsule.Checkpoint {
	t.Helper()
	var cp *capsule.Checkpoint
	natstest.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool {
		c, _, err := f.st.Checkpoints.Get(context.Background(), id)
		cp = c
		return err == nil && c.State.Status == capsule.Paused && c.State.Pause != nil && c.State.Pause.Trigger == capsule.TriggerCompositionGate
	}, "the gated step never waited at its gate")
	return cp
}

// TestCompositionGateAccept: a gated step waits, once its need completed,
// for a person, in pending, before anything is spent or executed; the
// step after it waits too. A decision on a step not at its gate is
// refused. Accepted, the step runs and the run completes; deciding again
// is refused.
func TestCompositionGateAccept(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	d, err := compose.Parse(f.gatedDoc(t, "gate-ok"))
	require.NoError(t, err)
	require.Empty(t, compose.Check(d, rules.Config{ExecutorKinds: []string{"produce", "translate", "validate"}}, time.Now()),
		"a gated step is no finding")

	r, err := f.composeAs(t, "alice", f.gatedDoc(t, "gate-ok"))
	require.NoError(t, err)
	draft, review, publish := r.Steps[0].CapsuleID, r.Steps[1].CapsuleID, r.Steps[2].CapsuleID
	require.Equal(t, capsule.Completed, f.ended(t, draft).State.Status)
	cp := f.heldAtGate(t, review)
	require.Zero(t, cp.State.BudgetUsed.Tokens, "nothing spent at the gate")
	require.Nil(t, f.rec.inputsOf(review), "the gated step was not executed")
	require.Contains(t, cp.State.Pause.Reason, "step review waits for a person: sagactl composition decide gate-ok review accept|reject",
		"the reason names the step, as decide takes it")
	pending, err := f.admin.Pending(ctx)
	require.NoError(t, err)
	var listed bool
	for _, p := range pending {
		listed = listed || (p.CapsuleID == review && p.Trigger == capsule.TriggerCompositionGate)
	}
	require.True(t, listed, "the gated step is in pending")
	s, _, err := f.st.Checkpoints.Get(ctx, publish)
	require.NoError(t, err)
	require.False(t, s.Terminal(), "the step after the gate waits")

	// Pausing and resuming the whole run leaves the gate to its person.
	alice := "alice"
	rec, err := compose.Find(ctx, f.st, "gate-ok", &alice, 0)
	require.NoError(t, err)
	act := func(resume bool) compose.Acting {
		return func(ctx context.Context, id, reason, by string) error {
			if resume {
				_, err := f.admin.Resume(ctx, id, admin.ResumeOptions{By: by, Reason: reason})
				return err
			}
			_, err := f.admin.Pause(ctx, id, reason, by)
			return err
		}
	}
	_, err = compose.Pause(ctx, f.st, act(false), rec, "ops", "hold")
	require.NoError(t, err)
	_, err = compose.Resume(ctx, f.st, act(true), rec, "ops", "go")
	require.NoError(t, err)
	f.heldAtGate(t, review)

	require.ErrorIs(t, f.decide(ctx, "gate-ok", "alice", "draft", true), compose.ErrNotGated, "draft has no gate")
	require.ErrorIs(t, f.decide(ctx, "gate-ok", "alice", "nope", true), store.ErrNotFound)
	require.NoError(t, f.decide(ctx, "gate-ok", "alice", "review", true))

	rec = f.runEnded(t, "gate-ok", "alice", 1)
	m := compose.Manifest(rec)
	require.Equal(t, compose.StateCompleted, m.State)
	require.Equal(t, 0, m.Summary.ExitCode)
	require.NotNil(t, f.rec.inputsOf(review), "accepted, the step ran")
	require.Error(t, f.decide(ctx, "gate-ok", "alice", "review", true), "decided already: the run ended")
}

// TestCompositionGateReject: rejected, the gated step halts
// operator_rejected, unexecuted, the step needing it halts
// dependency_failed, and the run ends partial (the draft passed).
func TestCompositionGateReject(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	r, err := f.composeAs(t, "alice", f.gatedDoc(t, "gate-no"))
	require.NoError(t, err)
	review, publish := r.Steps[1].CapsuleID, r.Steps[2].CapsuleID
	f.heldAtGate(t, review)
	require.NoError(t, f.decide(ctx, "gate-no", "alice", "review", false))

	rec := f.runEnded(t, "gate-no", "alice", 1)
	m := compose.Manifest(rec)
	require.Equal(t, compose.StatePartial, m.State)
	require.Equal(t, 12, m.Summary.ExitCode)
	require.Equal(t, string(capsule.Halted), m.Steps[1].State)
	require.Equal(t, capsule.OperatorRejected().String(), m.Steps[1].HaltReason)
	require.Nil(t, f.rec.inputsOf(review), "rejected, the step never ran")
	require.Nil(t, f.rec.inputsOf(publish))
	require.True(t, strings.HasPrefix(m.Steps[2].HaltReason, string(capsule.CodeDependencyFailed)), m.Steps[2].HaltReason)

	_, err = compose.Replay(ctx, f.st, func(ctx context.Context, id, reason, by string) error {
		_, err := f.admin.Replay(ctx, id, admin.ReplayOptions{By: by, Reason: reason, Dependents: true})
		return err
	}, rec, "ops", "second look")
	require.NoError(t, err)
	f.heldAtGate(t, review)
	require.Nil(t, f.rec.inputsOf(review), "replayed, the step waits for its person again")
	require.NoError(t, f.decide(ctx, "gate-no", "alice", "review", true))
	natstest.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool {
		r, err := compose.GetRun(ctx, f.st, "gate-no", "alice", 1)
		require.NoError(t, err)
		return r.Replays == 1 && r.OutcomeSent
	}, "the replayed round never ended")
	r2, err := compose.GetRun(ctx, f.st, "gate-no", "alice", 1)
	require.NoError(t, err)
	require.Equal(t, compose.StateCompleted, compose.Manifest(r2).State)
}
