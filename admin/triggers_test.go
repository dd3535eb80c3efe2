package admin_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
)

// TestPendingFollowsTheTriggerTable: sagactl pending (and the console's
// inbox) lists a parked capsule when its trigger's row says a person
// resumes it, but not work an executor accepted, which goes on when its
// result comes.
func TestPendingFollowsTheTriggerTable(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	parked := func(row capsule.TriggerInfo) *capsule.Checkpoint {
		return &capsule.Checkpoint{CapsuleID: "c", Key: "c", State: capsule.CheckpointState{
			Status: row.State, Phase: capsule.Execution, Cycle: 1,
			Pause: &capsule.PauseInfo{Trigger: row.Trigger, Reason: "r", At: t0},
		}}
	}
	listed := 0
	for _, row := range capsule.TriggerTable {
		item, ok := admin.PendingOf(parked(row), t0.Add(time.Minute))
		require.Equal(t, row.Resumer == capsule.ResumerPerson, ok, row.Trigger)
		if ok {
			listed++
			require.Equal(t, row.Trigger, item.Trigger)
			require.Equal(t, row.State, item.State)
			require.EqualValues(t, 60, item.AgeSecs)
		}
		if row.Watch == capsule.WatchExternal {
			cp := parked(row)
			cp.State.AwaitingCycle = 1
			_, ok := admin.PendingOf(cp, t0)
			require.False(t, ok, "%s on accepted work goes on by itself", row.Trigger)
		}
	}
	require.Positive(t, listed)
	// The triggers of PIPELINE §5 a person resumes.
	for _, tr := range []capsule.Trigger{capsule.TriggerBudgetWarning, capsule.TriggerDeadlineApproaching, capsule.TriggerBlockedExternal, capsule.TriggerOperatorManual, capsule.TriggerOperatorGate} {
		_, ok := admin.PendingOf(parked(tr.Info()), t0)
		require.True(t, ok, tr)
	}
	for _, tr := range []capsule.Trigger{capsule.TriggerLockContention, capsule.TriggerDependencies, capsule.TriggerWaveCapacity} {
		_, ok := admin.PendingOf(parked(tr.Info()), t0)
		require.False(t, ok, tr)
	}
}
