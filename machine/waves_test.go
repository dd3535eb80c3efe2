package machine_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
)

// TestWaitForWaveCapacity: a capsule without room in its wave waits (state
// waiting, trigger wave_capacity, its wave as what it waits for), refuses an
// operator's pause with a hint, resumes to AUTOMATED_GATES, or halts
// wave_closed only if still waiting since the sweep saw it. Its admission
// records the reservation with the transition.
func TestWaitForWaveCapacity(t *testing.T) {
	t.Parallel()
	cp := at(capsule.InProgress, capsule.AutomatedGates, 0)
	res, err := machine.Apply(cp, machine.Decide{Phase: capsule.AutomatedGates, Decision: machine.Decision{
		Action: machine.Park, Trigger: capsule.TriggerWaveCapacity, Reason: "no room", WaitFor: []string{"w"},
	}}, t0)
	require.NoError(t, err)
	st := res.Checkpoint.State
	require.Equal(t, capsule.Waiting, st.Status)
	require.Equal(t, capsule.TriggerWaveCapacity, st.Pause.Trigger)
	require.Equal(t, []string{"w"}, st.WaitingFor)
	require.Nil(t, res.Transition)
	require.True(t, res.Effects.Parked)

	_, err = machine.Apply(res.Checkpoint, machine.Pause{By: "ann"}, t0)
	require.ErrorIs(t, err, machine.ErrRefused)
	require.ErrorContains(t, err, "raise the wave's cap")

	since := t0
	halted, err := machine.Apply(res.Checkpoint, machine.End{State: capsule.Halted, Detail: capsule.WaveClosed("w").String(), IfWaitingSince: &since}, t0)
	require.NoError(t, err)
	require.Equal(t, "wave_closed:w", halted.Checkpoint.State.HaltReason)
	require.Equal(t, capsule.Halted, halted.Effects.Outcome)

	marked, err := machine.Apply(res.Checkpoint, machine.RequestResume{From: capsule.Waiting, Token: "tok"}, t0)
	require.NoError(t, err)
	flipped, err := machine.Apply(marked.Checkpoint, machine.Resume{Token: "tok", At: &machine.Position{Phase: capsule.AutomatedGates}}, t0)
	require.NoError(t, err)
	require.Equal(t, capsule.InProgress, flipped.Checkpoint.State.Status)
	require.Empty(t, flipped.Checkpoint.State.WaitingFor)

	reserved := capsule.Usage{Tokens: 1000, Dollars: 2}
	admitted, err := machine.Apply(flipped.Checkpoint, machine.Decide{Phase: capsule.AutomatedGates, Decision: machine.Decision{
		Action: machine.Advance, Record: &machine.Record{WaveReserved: &reserved},
	}}, t0)
	require.NoError(t, err)
	require.Equal(t, &reserved, admitted.Checkpoint.State.WaveReserved)
	require.Equal(t, capsule.Execution, admitted.Checkpoint.State.Phase)
}
