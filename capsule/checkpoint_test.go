package capsule_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

func fullCheckpoint() *capsule.Checkpoint {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return &capsule.Checkpoint{
		SchemaVersion: "1.0", CapsuleID: "id", Key: "id", TraceID: "t", WaveID: "w", Digest: "d",
		CreatedAt: at, UpdatedAt: at, ChildLimit: &capsule.ChildLimit{MaxAttempts: 2, WallUntil: &at},
		State: capsule.CheckpointState{
			Phase: capsule.ReviewPhase, PhaseName: "REVIEW", Progress: 71, Cycle: 2, Status: capsule.Paused,
			HaltReason: "x", BudgetUsed: capsule.Usage{Tokens: 1, Dollars: 2},
			LocksHeld: []string{"a"}, ArtifactRefs: []string{"artifact:id/1"},
			Findings:      []capsule.Finding{{Rule: 4, Message: "m"}},
			Reviews:       []capsule.ReviewEntry{{Cycle: 1, ReviewerID: "r", Verdict: capsule.ChangesRequested, Findings: []capsule.Finding{{Message: "f"}}, At: at}},
			Execution:     &capsule.ExecutionClaim{Cycle: 2, Holder: "h", ExpiresAt: at},
			Result:        &capsule.ExecutionResult{Cycle: 2, ArtifactRef: "artifact:id/2"},
			Pause:         &capsule.PauseInfo{Trigger: capsule.TriggerOperatorManual, At: at, ResumeToken: "tok"},
			Overrides:     &capsule.Overrides{Tokens: 9, Deadline: &at},
			Warned:        []capsule.Trigger{capsule.TriggerBudgetWarning},
			LockWaitSince: &at, AwaitingCycle: 2,
			AwaitingTokenHash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
			WaveReserved:      &capsule.Usage{Tokens: 1000, Dollars: 0.5},
			AgentQueries:      []capsule.AgentQuery{{ID: "q", ReplySubject: "_INBOX.r", Prompt: "p", Phase: capsule.ReviewPhase, Cycle: 2, At: at}},
		},
		History: []capsule.Transition{{Phase: capsule.Reception, PhaseName: "RECEPTION", Outcome: "passed", At: at}},
	}
}

// TestCloneIsDeep: a clone equals the original, and changing any part of it
// (appending to its history: transitions are never changed in place) leaves
// the original untouched. The JSON comparison catches a field added to the
// types but not to Clone.
func TestCloneIsDeep(t *testing.T) {
	t.Parallel()
	orig := fullCheckpoint()
	// Room to grow: an append to a clone sharing it must not write into it.
	orig.History = append(make([]capsule.Transition, 0, 4), orig.History...)
	before, err := json.Marshal(orig)
	require.NoError(t, err)
	c := orig.Clone()
	require.True(t, reflect.DeepEqual(orig, c))
	c.History = append(c.History, capsule.Transition{Phase: capsule.RealityAnchor, Outcome: "clone's"})
	orig.History = append(orig.History, capsule.Transition{Phase: capsule.RealityAnchor, Outcome: "original's"})
	require.Equal(t, "clone's", c.History[1].Outcome)
	orig.History = orig.History[:1]
	c.State.LocksHeld[0] = "changed"
	c.State.ArtifactRefs[0] = "changed"
	c.State.Findings[0].Message = "changed"
	c.State.Reviews[0].Findings[0].Message = "changed"
	c.State.Execution.Holder = "changed"
	c.State.Result.ArtifactRef = "changed"
	c.State.Pause.ResumeToken = "changed"
	*c.State.Overrides.Deadline = time.Time{}
	c.State.Warned[0] = capsule.TriggerLockContention
	*c.State.LockWaitSince = time.Time{}
	c.State.AgentQueries[0].Prompt = "changed"
	*c.ChildLimit.WallUntil = time.Time{}
	c.ChildLimit.MaxAttempts = 9
	after, err := json.Marshal(orig)
	require.NoError(t, err)
	require.JSONEq(t, string(before), string(after))
}
