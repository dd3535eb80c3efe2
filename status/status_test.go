package status_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/status"
)

// TestOfSaysWhy: a status tells what a capsule waits on, why it is paused
// and which calls failed, and only in the states where that means something.
func TestOfSaysWhy(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	cp := &capsule.Checkpoint{CapsuleID: "c1", Key: "c1", Producer: "alice", State: capsule.CheckpointState{
		Status: capsule.Waiting, Phase: capsule.AutomatedGates, WaitingFor: []string{"w1"},
		Pause: &capsule.PauseInfo{Trigger: capsule.TriggerWaveCapacity, At: at},
	}}
	s := status.Of(cp)
	require.Equal(t, string(capsule.TriggerWaveCapacity), s.WaitingOn)
	require.Equal(t, []string{"w1"}, s.Pending)
	require.Nil(t, s.Pause, "a waiting capsule is not paused")
	require.Equal(t, "alice", s.Producer)
	require.False(t, status.Settled(s), "a waiting capsule goes on by itself")

	cp.State.Pause, cp.State.WaitingFor = nil, []string{"d1"}
	require.Equal(t, string(capsule.TriggerDependencies), status.Of(cp).WaitingOn, "no trigger: its dependencies")

	cp.State = capsule.CheckpointState{Status: capsule.Paused, Phase: capsule.Execution, Cycle: 1,
		Pause:      &capsule.PauseInfo{Trigger: capsule.TriggerBlockedExternal, Reason: "needs a licence", By: "sagad", At: at},
		AttemptLog: []capsule.FailedAttempt{{Phase: capsule.Execution, Cycle: 1, Attempt: 1, Error: "exit 11", Decision: capsule.AttemptPaused, At: at}},
	}
	s = status.Of(cp)
	require.Empty(t, s.WaitingOn)
	require.Equal(t, &status.Pause{Trigger: capsule.TriggerBlockedExternal, Reason: "needs a licence", By: "sagad", At: at}, s.Pause)
	require.Len(t, s.Attempts, 1)
	require.True(t, status.Settled(s), "paused for a person: settled")

	cp.State.Status, cp.State.Pause = capsule.Completed, nil
	s = status.Of(cp)
	require.Nil(t, s.Pause)
	require.True(t, status.Settled(s))
	s.Attempts[0].Error = "changed"
	require.Equal(t, "exit 11", cp.State.AttemptLog[0].Error, "the status holds a copy")
}
