package machine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
)

// haltedAt is a capsule that ran to (ph, cycle) and halted there, having
// spent budget and produced an artifact on cycle 1.
func haltedAt(ph capsule.Phase, cycle int, reason string) *capsule.Checkpoint {
	cp := at(capsule.Halted, ph, cycle)
	cp.Digest = "d1"
	cp.State.HaltReason = reason
	cp.State.BudgetUsed = capsule.Usage{Tokens: 100, Dollars: 0.5}
	cp.State.Overrides = &capsule.Overrides{Tokens: 5000}
	cp.State.Findings = []capsule.Finding{{Message: "why"}}
	cp.State.Result = &capsule.ExecutionResult{Cycle: 1, ArtifactRef: "artifact:k/1"}
	cp.State.ArtifactRefs = []string{"artifact:k/1"}
	for p := capsule.RealityAnchor; p < ph; p++ {
		c := 0
		if p >= capsule.Execution {
			c = 1
		}
		cp.History = append(cp.History, capsule.Transition{Phase: p, PhaseName: p.String(), Cycle: c, Outcome: capsule.OutcomePassed})
	}
	cp.History = append(cp.History, capsule.Transition{Phase: ph, PhaseName: ph.String(), Cycle: cycle, Outcome: capsule.OutcomeHalted, Detail: reason})
	return cp
}

func TestReplay(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Hour)
	phase := func(p capsule.Phase) machine.Replay {
		return machine.Replay{Token: "t2", From: p, FromSet: true, By: "op"}
	}
	tests := []struct {
		name    string
		cp      func() *capsule.Checkpoint
		ev      machine.Replay
		wantErr error
		check   func(t *testing.T, before, after *capsule.Checkpoint, res machine.Result)
	}{
		{
			name: "by default from the phase where it halted, at a fresh cycle",
			cp:   func() *capsule.Checkpoint { return haltedAt(capsule.Execution, 1, "executor_failed:down") },
			ev:   machine.Replay{Token: "t2", By: "op", Reason: "worker back"},
			check: func(t *testing.T, before, after *capsule.Checkpoint, res machine.Result) {
				st := after.State
				require.Equal(t, capsule.InProgress, st.Status)
				require.Equal(t, capsule.Execution, st.Phase)
				require.Equal(t, 2, st.Cycle, "cycles number on: the new run's are its own")
				require.Equal(t, 1, after.CycleBase)
				require.Equal(t, 1, after.RunCycle(st.Cycle), "Rule 12 counts the run's cycles")
				require.Equal(t, 2, after.Run)
				require.Equal(t, 2, after.RunNumber())
				require.Equal(t, "t2", after.ReplayToken)
				require.Empty(t, st.HaltReason)
				require.Nil(t, st.Findings)
				require.Nil(t, st.Result, "EXECUTION runs the executor again")
				require.Equal(t, capsule.Usage{Tokens: 100, Dollars: 0.5}, st.BudgetUsed, "spend carries over")
				require.Equal(t, int64(5000), st.Overrides.Tokens, "raised caps carry over")
				require.Equal(t, capsule.AutomatedGates.Progress(), st.Progress, "the progress of the phases before")
				require.Len(t, after.History, len(before.History)+1, "one run boundary, no transition rewritten")
				b := after.History[len(after.History)-1]
				require.Equal(t, capsule.OutcomeReplayed, b.Outcome)
				require.Equal(t, 2, b.Run)
				require.Equal(t, capsule.Execution, b.Phase, "the boundary stands where the run ended")
				require.Equal(t, 1, b.Cycle)
				require.Contains(t, b.Detail, "run 2 from EXECUTION cycle 2, by op: worker back")
				require.Nil(t, res.Transition)
				require.Equal(t, now, after.UpdatedAt)
			},
		},
		{
			name: "from an earlier phase",
			cp:   func() *capsule.Checkpoint { return haltedAt(capsule.Execution, 1, "executor_failed:down") },
			ev:   phase(capsule.RealityAnchor),
			check: func(t *testing.T, _, after *capsule.Checkpoint, _ machine.Result) {
				require.Equal(t, capsule.RealityAnchor, after.State.Phase)
				require.Equal(t, 2, after.State.Cycle, "before EXECUTION too: no event or history entry of run 1 is found again")
				require.Equal(t, capsule.Reception.Progress(), after.State.Progress)
			},
		},
		{
			name: "REVIEW takes up the last artifact as the new cycle's result",
			cp:   func() *capsule.Checkpoint { return haltedAt(capsule.ReviewPhase, 1, "reviewer_failed:down") },
			ev:   machine.Replay{Token: "t2"},
			check: func(t *testing.T, _, after *capsule.Checkpoint, _ machine.Result) {
				require.Equal(t, capsule.ReviewPhase, after.State.Phase)
				require.Equal(t, &capsule.ExecutionResult{Cycle: 2, ArtifactRef: "artifact:k/1"}, after.State.Result)
			},
		},
		{
			name: "a cancelled capsule replays from where it was cancelled",
			cp: func() *capsule.Checkpoint {
				cp := haltedAt(capsule.Planning, 0, "")
				cp.State.Status, cp.State.HaltReason = capsule.Cancelled, ""
				cp.History[len(cp.History)-1].Outcome = capsule.OutcomeCancelled
				return cp
			},
			ev: machine.Replay{Token: "t2"},
			check: func(t *testing.T, _, after *capsule.Checkpoint, _ machine.Result) {
				require.Equal(t, capsule.Planning, after.State.Phase)
				require.Equal(t, 1, after.State.Cycle)
				require.Equal(t, 0, after.CycleBase)
			},
		},
		{
			name: "corrected bytes pass RECEPTION and start at REALITY_ANCHOR",
			cp: func() *capsule.Checkpoint {
				return haltedAt(capsule.RealityAnchor, 0, "reality_anchor_failed:[file:x]")
			},
			ev: machine.Replay{Token: "t2", Digest: "d2"},
			check: func(t *testing.T, _, after *capsule.Checkpoint, res machine.Result) {
				require.Equal(t, "d2", after.Digest)
				require.Equal(t, capsule.RealityAnchor, after.State.Phase)
				require.Equal(t, 1, after.State.Cycle)
				require.NotNil(t, res.Transition)
				require.Equal(t, capsule.Reception, res.Transition.Phase)
				require.Equal(t, capsule.OutcomePassed, res.Transition.Outcome)
				require.Equal(t, 2, res.Transition.Run)
				require.Equal(t, &machine.Position{Phase: capsule.RealityAnchor, Cycle: 1}, res.Effects.Next)
			},
		},
		{
			name: "a run after a run: 3",
			cp: func() *capsule.Checkpoint {
				cp := haltedAt(capsule.Execution, 3, "executor_failed:down")
				cp.Run, cp.CycleBase, cp.ReplayToken = 2, 2, "t1"
				return cp
			},
			ev: machine.Replay{Token: "t2"},
			check: func(t *testing.T, _, after *capsule.Checkpoint, _ machine.Result) {
				require.Equal(t, 3, after.Run)
				require.Equal(t, 4, after.State.Cycle)
				require.Equal(t, 3, after.CycleBase)
			},
		},
		{
			name: "the same replay again finds its run started",
			cp: func() *capsule.Checkpoint {
				cp := at(capsule.InProgress, capsule.Execution, 2)
				cp.Run, cp.ReplayToken = 2, "t2"
				return cp
			},
			ev: machine.Replay{Token: "t2"},
			check: func(t *testing.T, before, after *capsule.Checkpoint, res machine.Result) {
				require.False(t, res.Changed)
				require.Same(t, before, after)
			},
		},
		{
			name: "another replay of a running capsule is refused (two racing make one run)",
			cp: func() *capsule.Checkpoint {
				cp := at(capsule.InProgress, capsule.Execution, 2)
				cp.Run, cp.ReplayToken = 2, "t1"
				return cp
			},
			ev:      machine.Replay{Token: "t2"},
			wantErr: machine.ErrRefused,
		},
		{
			name:    "a later phase than where it halted is refused",
			cp:      func() *capsule.Checkpoint { return haltedAt(capsule.Execution, 1, "executor_failed:down") },
			ev:      phase(capsule.ReviewPhase),
			wantErr: machine.ErrRefused,
		},
		{
			name:    "RECEPTION without corrected bytes is refused",
			cp:      func() *capsule.Checkpoint { return haltedAt(capsule.Execution, 1, "executor_failed:down") },
			ev:      phase(capsule.Reception),
			wantErr: machine.ErrRefused,
		},
		{
			name:    "a phase out of range is invalid",
			cp:      func() *capsule.Checkpoint { return haltedAt(capsule.Execution, 1, "executor_failed:down") },
			ev:      phase(capsule.Phase(9)),
			wantErr: machine.ErrInvalid,
		},
		{
			name:    "corrected bytes from a later phase are invalid",
			cp:      func() *capsule.Checkpoint { return haltedAt(capsule.Execution, 1, "executor_failed:down") },
			ev:      machine.Replay{Token: "t2", Digest: "d2", From: capsule.Planning, FromSet: true},
			wantErr: machine.ErrInvalid,
		},
		{
			name:    "a completed capsule is refused",
			cp:      func() *capsule.Checkpoint { return ended(capsule.Completed) },
			ev:      machine.Replay{Token: "t2"},
			wantErr: machine.ErrRefused,
		},
		{
			name: "bytes RECEPTION never accepted (an x- key) are refused",
			cp: func() *capsule.Checkpoint {
				cp := haltedAt(capsule.Reception, 0, "schema_invalid:[/task]")
				cp.Key = "x-17"
				return cp
			},
			ev:      machine.Replay{Token: "t2"},
			wantErr: machine.ErrRefused,
		},
		{
			name:    "no token is invalid",
			cp:      func() *capsule.Checkpoint { return haltedAt(capsule.Execution, 1, "executor_failed:down") },
			ev:      machine.Replay{},
			wantErr: machine.ErrInvalid,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cp := tt.cp()
			res, err := machine.Apply(cp, tt.ev, now)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				var r *machine.Refusal
				require.ErrorAs(t, err, &r)
				require.Equal(t, "replay", r.Event)
				return
			}
			require.NoError(t, err)
			tt.check(t, cp, res.Checkpoint, res)
		})
	}
}

// TestReplayedRunTransitions: a replayed run's transitions carry its run,
// its gates lead to EXECUTION at its own cycle, and Rule 12's count starts
// afresh.
func TestReplayedRunTransitions(t *testing.T) {
	t.Parallel()
	cp := haltedAt(capsule.AutomatedGates, 0, "dependency_failed:dep")
	res, err := machine.Apply(cp, machine.Replay{Token: "t2"}, t0)
	require.NoError(t, err)
	cp = res.Checkpoint
	require.Equal(t, capsule.AutomatedGates, cp.State.Phase)
	require.Equal(t, 1, cp.State.Cycle)

	res, err = machine.Apply(cp, machine.Decide{Phase: capsule.AutomatedGates, Cycle: 1, Decision: machine.AdvanceWith()}, t0)
	require.NoError(t, err)
	require.Equal(t, 2, res.Transition.Run)
	require.Equal(t, 2, res.Checkpoint.History[len(res.Checkpoint.History)-1].Run)
	require.Equal(t, &machine.Position{Phase: capsule.Execution, Cycle: 1}, res.Effects.Next)
	require.Equal(t, 1, res.Checkpoint.State.Cycle)

	// A run-2 capsule halted at EXECUTION cycle 4 replays at cycle 5.
	cp = haltedAt(capsule.Execution, 4, "executor_failed:x")
	res, err = machine.Apply(cp, machine.Replay{Token: "t3", From: capsule.AutomatedGates, FromSet: true}, t0)
	require.NoError(t, err)
	cp = res.Checkpoint
	res, err = machine.Apply(cp, machine.Decide{Phase: capsule.AutomatedGates, Cycle: 5, Decision: machine.AdvanceWith()}, t0)
	require.NoError(t, err)
	require.Equal(t, &machine.Position{Phase: capsule.Execution, Cycle: 5}, res.Effects.Next)
	require.Equal(t, 1, res.Checkpoint.RunCycle(5))
	require.Equal(t, 2, res.Checkpoint.RunCycle(6))
}

// TestReplayedReceptionHasItsOwnEvent: a corrected capsule's run passes
// RECEPTION again; its received event must not share run 1's id, or the
// events stream drops it as a duplicate.
func TestReplayedReceptionHasItsOwnEvent(t *testing.T) {
	cp := &capsule.Checkpoint{Key: "k", CapsuleID: "k", History: []capsule.Transition{
		{Phase: capsule.Reception, Outcome: capsule.OutcomePassed},
		{Phase: capsule.Reception, Cycle: 3, Run: 2, Outcome: capsule.OutcomePassed},
	}}
	var ids []string
	for _, e := range machine.CheckpointEvents(cp) {
		if e.Kind == capsule.EventReceived {
			ids = append(ids, e.ID)
		}
	}
	if len(ids) != 2 || ids[0] == ids[1] {
		t.Fatalf("received event ids %v: want two distinct", ids)
	}
	if ids[0] != "k.0.0.received" {
		t.Fatalf("run 1's received event id %q changed", ids[0])
	}
}
