package machine_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
)

// TestParkFollowsTheTriggerTable parks a running capsule with every
// trigger a phase parks with, and an operator's pause over it: the state,
// the warnings remembered, the locks kept and the pause refused are what
// the trigger's row of capsule.TriggerTable says.
func TestParkFollowsTheTriggerTable(t *testing.T) {
	t.Parallel()
	for _, row := range capsule.TriggerTable {
		if row.State == capsule.WaitingForOperator {
			continue // the operator gate: a Decision's Wait, below
		}
		t.Run(string(row.Trigger), func(t *testing.T) {
			t.Parallel()
			ph := capsule.Execution
			if row.State == capsule.Waiting {
				ph = capsule.AutomatedGates // a wait comes before anything is spent
			}
			cp := at(capsule.InProgress, ph, 1)
			cp.State.LocksHeld = []string{"file:a"}
			res, err := machine.Apply(cp, machine.Decide{Phase: ph, Cycle: 1, Decision: machine.ParkWith(row.Trigger, "r")}, t0)
			require.NoError(t, err)
			st := res.Checkpoint.State
			require.Equal(t, row.State, st.Status)
			require.Equal(t, row.Trigger, st.Pause.Trigger)
			require.Equal(t, capsule.BySagad, st.Pause.By)
			require.True(t, res.Effects.Parked)
			require.Equal(t, row.Once, st.HasWarned(row.Trigger), "remembered as warned only when it fires once")
			if ph == capsule.Execution {
				require.Equal(t, row.KeepsLocks, len(st.LocksHeld) == 1, "locks kept at EXECUTION")
			}

			paused, err := machine.Apply(res.Checkpoint, machine.Pause{Reason: "look", By: "op"}, t0)
			switch {
			case row.PauseRefused != "":
				require.ErrorIs(t, err, machine.ErrRefused)
				require.ErrorContains(t, err, row.PauseRefused)
			case row.Operator:
				require.NoError(t, err)
				require.False(t, paused.Changed, "paused by an operator already")
			default:
				require.NoError(t, err)
				require.True(t, paused.Changed, "an operator's pause takes over sagad's")
				require.True(t, paused.Checkpoint.State.Pause.Trigger.Info().Operator)
			}
		})
	}
	t.Run("operator gate", func(t *testing.T) {
		t.Parallel()
		res, err := machine.Apply(at(capsule.InProgress, capsule.ReviewPhase, 1),
			machine.Decide{Phase: capsule.ReviewPhase, Cycle: 1, Decision: machine.Decision{Action: machine.Advance, Wait: true}}, t0)
		require.NoError(t, err)
		st := res.Checkpoint.State
		require.Equal(t, st.Pause.Trigger.Info().State, st.Status)
		// Kept, so the sweeper finds it when its deadline passes.
		require.True(t, st.Pause.Trigger.Info().Continuation)
	})
}
