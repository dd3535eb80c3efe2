package machine_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
)

// received is a checkpoint as RECEPTION makes it, with an empty history.
func received() *capsule.Checkpoint {
	cp := at(capsule.InProgress, capsule.Reception, 0)
	cp.History = []capsule.Transition{}
	return cp
}

// advance applies n advances from RECEPTION on, so the history has room.
func advance(t *testing.T, cp *capsule.Checkpoint, n int) *capsule.Checkpoint {
	t.Helper()
	for i := range n {
		st := cp.State
		res, err := machine.Apply(cp, machine.Decide{Phase: st.Phase, Cycle: st.Cycle, Decision: machine.AdvanceWith()}, t0.Add(time.Duration(i)*time.Second))
		require.NoError(t, err)
		cp = res.Checkpoint
	}
	return cp
}

// TestAppendsNeverAlias: two different events applied to the same
// checkpoint, whose history has room, each see their own transition and
// not the other's, and the checkpoint still has its own history; so do the
// results' own next transitions.
func TestAppendsNeverAlias(t *testing.T) {
	t.Parallel()
	cp := advance(t, received(), 3) // at PLANNING, history of 3 with room
	require.Greater(t, cap(cp.History), len(cp.History), "the history has room to append into")
	before := slices.Clone(cp.History)
	st := cp.State
	a, err := machine.Apply(cp, machine.Decide{Phase: st.Phase, Cycle: st.Cycle, Decision: machine.AdvanceWith()}, t0.Add(time.Hour))
	require.NoError(t, err)
	b, err := machine.Apply(cp, machine.End{State: capsule.Cancelled, Detail: "cancelled"}, t0.Add(2*time.Hour))
	require.NoError(t, err)

	require.Equal(t, before, cp.History, "the input's history")
	require.Len(t, a.Checkpoint.History, 4)
	require.Len(t, b.Checkpoint.History, 4)
	require.Equal(t, capsule.OutcomePassed, a.Checkpoint.History[3].Outcome)
	require.Equal(t, capsule.OutcomeCancelled, b.Checkpoint.History[3].Outcome)
	require.Same(t, &a.Checkpoint.History[3], a.Transition, "the result's transition is its history's last")
	require.Same(t, &b.Checkpoint.History[3], b.Transition)

	// Each result appends again, the first into the array it shares with
	// the input, and nobody sees another's entries.
	a2 := advance(t, a.Checkpoint, 1)
	b2, err := machine.Apply(b.Checkpoint, machine.Replay{Token: "r"}, t0.Add(3*time.Hour))
	require.NoError(t, err)
	require.Equal(t, before, cp.History)
	require.Equal(t, capsule.OutcomePassed, a.Checkpoint.History[3].Outcome)
	require.Len(t, a.Checkpoint.History, 4)
	require.Equal(t, capsule.OutcomeCancelled, b.Checkpoint.History[3].Outcome)
	require.Equal(t, capsule.Execution, a2.History[4].Phase)
	require.Equal(t, capsule.OutcomeReplayed, b2.Checkpoint.History[4].Outcome)
	require.Equal(t, 2, b2.Checkpoint.History[4].Run)
}

// TestConcurrentAppendsNeverAlias: goroutines applying different events to
// one shared checkpoint (the process's cached one) at once each get their
// own transition; run with -race, it also shows the claim orders them.
func TestConcurrentAppendsNeverAlias(t *testing.T) {
	t.Parallel()
	cp := advance(t, received(), 2)
	before := slices.Clone(cp.History)
	const n = 16
	results := make([]*capsule.Checkpoint, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			at := t0.Add(time.Duration(i+1) * time.Hour)
			res, err := machine.Apply(cp, machine.Decide{Phase: cp.State.Phase, Cycle: cp.State.Cycle, Decision: machine.AdvanceWith()}, at)
			if err == nil {
				results[i] = res.Checkpoint
			}
		})
	}
	wg.Wait()
	require.Equal(t, before, cp.History)
	for i, r := range results {
		require.NotNil(t, r, "apply %d", i)
		require.Equal(t, before, r.History[:len(before)])
		require.Equal(t, t0.Add(time.Duration(i+1)*time.Hour), r.History[len(before)].At, "apply %d sees its own transition", i)
	}
}

// TestRandomHistoryTree applies random events to random checkpoints of a
// growing tree of results (every checkpoint can be applied to again, as a
// retried write or a shared cached one can) and checks at the end that
// every checkpoint's history is still what it was when it was made: its
// parent's and its own transitions, each at its own time.
func TestRandomHistoryTree(t *testing.T) {
	t.Parallel()
	type node struct {
		cp   *capsule.Checkpoint
		want []capsule.Transition
	}
	r := rand.New(rand.NewPCG(47, 53))
	tree := []node{{cp: received(), want: []capsule.Transition{}}}
	for i := range 4000 {
		n := tree[r.IntN(len(tree))]
		res, err := machine.Apply(n.cp, randomEvent(r, n.cp, i), t0.Add(time.Duration(i)*time.Second))
		if err != nil || !res.Changed || len(res.Checkpoint.History) == len(n.want) {
			continue
		}
		h := res.Checkpoint.History
		require.Equal(t, n.want, h[:len(n.want)], "step %d: the parent's history", i)
		for _, tr := range h[len(n.want):] {
			require.Equal(t, t0.Add(time.Duration(i)*time.Second), tr.At, "step %d: the new transitions are this step's", i)
		}
		tree = append(tree, node{res.Checkpoint, slices.Clone(h)})
	}
	require.Greater(t, len(tree), 1000, "the tree grew")
	for i, n := range tree {
		require.Equal(t, n.want, n.cp.History, "checkpoint %d changed after it was made", i)
	}
}

// randomEvent is an event that applies to cp more often than not: an
// advance, a loop back at REVIEW, a halt, a cancel or a replay.
func randomEvent(r *rand.Rand, cp *capsule.Checkpoint, i int) machine.Event {
	st := cp.State
	switch r.IntN(10) {
	case 0:
		return machine.Decide{Phase: st.Phase, Cycle: st.Cycle, Decision: machine.HaltWith(capsule.ExecutorFailed("x"))}
	case 1:
		return machine.End{State: capsule.Cancelled, Detail: "cancelled"}
	case 2, 3:
		return machine.Replay{Token: fmt.Sprint("r", i)}
	case 4, 5:
		if st.Phase == capsule.ReviewPhase {
			return machine.Decide{Phase: st.Phase, Cycle: st.Cycle, Decision: machine.Decision{Action: machine.LoopBack}}
		}
	}
	return machine.Decide{Phase: st.Phase, Cycle: st.Cycle, Decision: machine.AdvanceWith()}
}
