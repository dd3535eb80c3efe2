package compose_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/console"
	"github.com/sagad/sagad/internal/natstest"
)

// consoleIndex is a console's index of f's checkpoints, kept current with
// the composition records, as a console keeps it.
func (f *fixture) consoleIndex(t *testing.T) *console.Index {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	x := console.NewIndex(nil, nil)
	done := make(chan struct{}, 2)
	go func() { x.Run(ctx, f.st.Checkpoints.WatchAll); done <- struct{}{} }()
	go func() { x.FollowCompositions(ctx, f.js); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	select {
	case <-x.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the console's index never loaded")
	}
	return x
}

func inboxIDs(in console.Inbox) []string {
	var ids []string
	for _, l := range [][]*console.Row{in.Decide, in.Paused, in.Waiting, in.Halted} {
		for _, r := range l {
			ids = append(ids, r.CapsuleID)
		}
	}
	return ids
}

func pendingIDs(t *testing.T, f *fixture) []string {
	t.Helper()
	items, err := f.admin.Pending(context.Background())
	require.NoError(t, err)
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.CapsuleID
	}
	return ids
}

// TestSupersededLoopRounds: a loop that needed two rounds passes; its
// round-1 verifier halted (rejected with findings), which is its run's
// history: the console's inbox (its dead letters), its bulk selection and
// a bulk's list (Current) leave round 1 out, the plain list and the run's
// status keep it, under round 1.
func TestSupersededLoopRounds(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	x := f.consoleIndex(t)
	r, err := f.composeAs(t, "alice", f.loopDoc(t, "loop-sup", 3, 2))
	require.NoError(t, err)
	draft1, check1 := r.Steps[0].CapsuleID, r.Steps[1].CapsuleID
	rec := f.runEnded(t, "loop-sup", "alice", 1)
	require.Equal(t, compose.StateCompleted, rec.StateOf())
	cp, _, err := f.st.Checkpoints.Get(ctx, check1)
	require.NoError(t, err)
	require.Equal(t, capsule.Halted, cp.State.Status, "round 1's verifier is a dead letter but for its loop")

	require.Equal(t, []string{draft1, check1}, admin.SupersededIDs(rec))
	o := compose.Status(ctx, f.st, rec)
	require.Equal(t, []string{draft1, check1}, o.Loops[0].Rounds[0].CapsuleIDs, "status lists round 1 under it")

	natstest.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool {
		return x.Superseded(check1) && x.Superseded(draft1)
	}, "the console never learnt round 1 is superseded")
	in := x.Inbox(200)
	require.NotContains(t, inboxIDs(in), check1)
	require.NotContains(t, inboxIDs(in), draft1)
	require.Zero(t, in.Counts["halted"], "no dead letter: the badge counts none")
	keys, _ := x.Keys(console.Query{State: capsule.Halted, Phase: -1}, 1000)
	require.Empty(t, keys, "a bulk selection of the halted leaves round 1 alone")
	for _, id := range slices.Concat(rec.Steps) {
		require.False(t, x.Superseded(id), "the last round is the run's own")
	}

	all, err := f.admin.List(ctx, admin.ListQuery{State: capsule.Halted})
	require.NoError(t, err)
	require.Len(t, all.Items, 1, "the list shows every capsule")
	current, err := f.admin.List(ctx, admin.ListQuery{State: capsule.Halted, Current: true})
	require.NoError(t, err)
	require.Empty(t, current.Items, "what bulk selects leaves round 1 out")
	require.NotContains(t, pendingIDs(t, f), check1)
}

// TestSupersededRun: a run's step waits at its operator gate, in pending;
// once an edited document under the same id made run 2, run 1's step is
// history (pending and the inbox leave it out) and run 2's gate waits in
// its place.
func TestSupersededRun(t *testing.T) {
	t.Parallel()
	f := setup(t)
	x := f.consoleIndex(t)
	r1, err := f.composeAs(t, "alice", f.gatedDoc(t, "run-sup"))
	require.NoError(t, err)
	gate1 := r1.Steps[1].CapsuleID
	f.heldAtGate(t, gate1)
	require.Contains(t, pendingIDs(t, f), gate1)
	natstest.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool {
		return slices.Contains(inboxIDs(x.Inbox(200)), gate1)
	}, "run 1's gate never reached the inbox")

	var doc map[string]any
	require.NoError(t, json.Unmarshal(f.gatedDoc(t, "run-sup"), &doc))
	doc["steps"].([]any)[2].(map[string]any)["capsule"].(map[string]any)["task"].(map[string]any)["title"] = "publish, edited"
	edited, err := json.Marshal(doc)
	require.NoError(t, err)
	r2, err := f.composeAs(t, "alice", edited)
	require.NoError(t, err)
	require.Equal(t, 2, r2.Run)
	gate2 := r2.Steps[1].CapsuleID
	f.heldAtGate(t, gate2)

	pending := pendingIDs(t, f)
	require.NotContains(t, pending, gate1, "run 1 is superseded by run 2")
	require.Contains(t, pending, gate2)
	natstest.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool {
		ids := inboxIDs(x.Inbox(200))
		return !slices.Contains(ids, gate1) && slices.Contains(ids, gate2)
	}, "the inbox still holds run 1's gate, or not run 2's")
}
