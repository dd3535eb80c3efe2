package adminsvc

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	sagastatus "github.com/sagad/sagad/status"
)

// TestStatusReplySchemaPauseAndAttempts: a paused capsule's status, with
// its trigger, reason and failed attempts, is a valid status-reply.
func TestStatusReplySchemaPauseAndAttempts(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 25, 1, 2, 3, 0, time.UTC)
	cp := &capsule.Checkpoint{
		SchemaVersion: capsule.CheckpointSchemaVersion, CapsuleID: "01J00000000000000000000000", Key: "01J00000000000000000000000",
		CreatedAt: at, UpdatedAt: at,
		State: capsule.CheckpointState{
			Phase: capsule.Execution, PhaseName: "EXECUTION", Cycle: 1, Status: capsule.Paused,
			Pause: &capsule.PauseInfo{Trigger: capsule.TriggerBlockedExternal, Reason: "the executor asks for a person", By: capsule.BySagad, At: at},
			AttemptLog: []capsule.FailedAttempt{
				{Phase: capsule.Execution, Cycle: 1, Attempt: 1, ExitCode: 1, Error: "boom", Decision: capsule.AttemptRetried, At: at},
				{Phase: capsule.Execution, Cycle: 1, Attempt: 2, ExitCode: 11, Error: "help", Decision: capsule.AttemptPaused, At: at},
			},
		},
	}
	s := sagastatus.Of(cp)
	require.NotNil(t, s.Pause)
	require.Len(t, s.Attempts, 2)
	b, err := json.Marshal(s)
	require.NoError(t, err)
	require.NoError(t, validateSchema(t, "status-reply", b), "%s", b)

	cp.State.Status, cp.State.HaltReason = capsule.Halted, "executor_failed:x"
	require.Nil(t, sagastatus.Of(cp).Pause, "a pause record left on a halted capsule is not shown")
}
