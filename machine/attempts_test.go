package machine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
)

func TestRecordAttempt(t *testing.T) {
	t.Parallel()
	claimed, err := machine.Apply(at(capsule.InProgress, capsule.Execution, 1), machine.Claim{Phase: capsule.Execution, Cycle: 1, Holder: "a", ExpiresAt: t0.Add(time.Minute)}, t0)
	require.NoError(t, err)
	cp := claimed.Checkpoint
	ev := machine.RecordAttempt{Cycle: 1, Holder: "a", Attempt: 1, Failure: capsule.AttemptFailure{ExitCode: 1, Error: "boom"}, BudgetUsed: capsule.Usage{Tokens: 5}}

	res, err := machine.Apply(cp, ev, t0.Add(time.Second))
	require.NoError(t, err)
	require.True(t, res.Changed)
	n, last := res.Checkpoint.State.FailedAttempts(1)
	require.Equal(t, 1, n)
	require.Equal(t, "boom", last.Error)
	require.Equal(t, int64(5), res.Checkpoint.State.BudgetUsed.Tokens)
	require.Nil(t, cp.State.Attempts, "Apply never changes its input")
	n, _ = res.Checkpoint.State.FailedAttempts(2)
	require.Zero(t, n, "attempts count per cycle")

	again, err := machine.Apply(res.Checkpoint, ev, t0.Add(2*time.Second))
	require.NoError(t, err)
	require.False(t, again.Changed, "recording an attempt twice changes nothing")

	for name, tc := range map[string]struct {
		cp   *capsule.Checkpoint
		ev   machine.RecordAttempt
		kind error
	}{
		"other holder": {cp, machine.RecordAttempt{Cycle: 1, Holder: "b", Attempt: 1}, machine.ErrClaimLost},
		"no claim":     {at(capsule.InProgress, capsule.Execution, 1), machine.RecordAttempt{Cycle: 1, Holder: "a", Attempt: 1}, machine.ErrClaimLost},
		"other cycle":  {cp, machine.RecordAttempt{Cycle: 2, Holder: "a", Attempt: 1}, machine.ErrStale},
		"other phase":  {at(capsule.InProgress, capsule.AutomatedGates, 1), machine.RecordAttempt{Cycle: 1, Holder: "a", Attempt: 1}, machine.ErrStale},
		"halted":       {ended(capsule.Halted), machine.RecordAttempt{Cycle: 1, Holder: "a", Attempt: 1}, machine.ErrStale},
		"attempt zero": {cp, machine.RecordAttempt{Cycle: 1, Holder: "a"}, machine.ErrInvalid},
	} {
		_, err := machine.Apply(tc.cp, tc.ev, t0)
		require.ErrorIs(t, err, tc.kind, name)
	}
}

// TestRecordReviewAttempt: a reviewer's failed attempts are counted apart
// from the executor's of the same cycle, and only at REVIEW.
func TestRecordReviewAttempt(t *testing.T) {
	t.Parallel()
	claimed, err := machine.Apply(at(capsule.InProgress, capsule.ReviewPhase, 1), machine.Claim{Phase: capsule.ReviewPhase, Cycle: 1, Holder: "a", ExpiresAt: t0.Add(time.Minute)}, t0)
	require.NoError(t, err)
	cp := claimed.Checkpoint
	// EXECUTION of cycle 1 failed once before it succeeded.
	cp.State.Attempts = &capsule.ExecutionAttempts{Cycle: 1, Failed: 1, LastFailure: capsule.AttemptFailure{Error: "exec"}}
	n, _ := cp.State.FailedAttemptsAt(capsule.ReviewPhase, 1)
	require.Zero(t, n, "the executor's attempts are not the reviewer's")

	ev := machine.RecordAttempt{Phase: capsule.ReviewPhase, Cycle: 1, Holder: "a", Attempt: 1, Failure: capsule.AttemptFailure{ExitCode: 12, Error: "boom"}}
	res, err := machine.Apply(cp, ev, t0.Add(time.Second))
	require.NoError(t, err)
	require.True(t, res.Changed)
	n, last := res.Checkpoint.State.FailedAttemptsAt(capsule.ReviewPhase, 1)
	require.Equal(t, 1, n)
	require.Equal(t, "boom", last.Error)
	n, _ = res.Checkpoint.State.FailedAttempts(1)
	require.Zero(t, n, "the reviewer's attempts are not the executor's")
	again, err := machine.Apply(res.Checkpoint, ev, t0.Add(2*time.Second))
	require.NoError(t, err)
	require.False(t, again.Changed)

	for name, tc := range map[string]struct {
		cp   *capsule.Checkpoint
		ev   machine.RecordAttempt
		kind error
	}{
		"at EXECUTION":  {cp, machine.RecordAttempt{Cycle: 1, Holder: "a", Attempt: 1}, machine.ErrStale},
		"at HANDOFF":    {cp, machine.RecordAttempt{Phase: capsule.Handoff, Cycle: 1, Holder: "a", Attempt: 1}, machine.ErrInvalid},
		"other holder":  {cp, machine.RecordAttempt{Phase: capsule.ReviewPhase, Cycle: 1, Holder: "b", Attempt: 1}, machine.ErrClaimLost},
		"review halted": {ended(capsule.Halted), machine.RecordAttempt{Phase: capsule.ReviewPhase, Cycle: 1, Holder: "a", Attempt: 1}, machine.ErrStale},
	} {
		_, err := machine.Apply(tc.cp, tc.ev, t0)
		require.ErrorIs(t, err, tc.kind, name)
	}
}

// TestAttemptLog: every recorded attempt joins the attempt log with the
// policy's decision and the time it was recorded; an attempt the policy
// halts on joins it with the halt's record; the log's events are
// attempt_failed events placed among the transitions' by time, one id per
// attempt.
func TestAttemptLog(t *testing.T) {
	t.Parallel()
	claimed, err := machine.Apply(at(capsule.InProgress, capsule.Execution, 1), machine.Claim{Phase: capsule.Execution, Cycle: 1, Holder: "a", ExpiresAt: t0.Add(time.Minute)}, t0)
	require.NoError(t, err)
	cp := claimed.Checkpoint
	res, err := machine.Apply(cp, machine.RecordAttempt{Cycle: 1, Holder: "a", Attempt: 1, Failure: capsule.AttemptFailure{ExitCode: 1, Error: "boom"}}, t0.Add(time.Second))
	require.NoError(t, err)
	res, err = machine.Apply(res.Checkpoint, machine.RecordAttempt{Cycle: 1, Holder: "a", Attempt: 2, Failure: capsule.AttemptFailure{ExitCode: 11, Error: "ask"}, Decision: capsule.AttemptPaused}, t0.Add(2*time.Second))
	require.NoError(t, err)
	log := res.Checkpoint.State.AttemptLog
	require.Len(t, log, 2)
	require.Equal(t, capsule.FailedAttempt{Phase: capsule.Execution, Cycle: 1, Attempt: 1, ExitCode: 1, Error: "boom", Decision: capsule.AttemptRetried, At: t0.Add(time.Second).UTC()}, log[0])
	require.Equal(t, capsule.AttemptPaused, log[1].Decision)

	halt := machine.Decision{Action: machine.Halt, Halt: capsule.ExecutorFailed("x"), Record: &machine.Record{
		Attempt: &capsule.FailedAttempt{Phase: capsule.Execution, Cycle: 1, Attempt: 3, ExitCode: 2, Error: "x", Decision: capsule.AttemptHalted, At: t0.Add(3 * time.Second)},
	}}
	res, err = machine.Apply(res.Checkpoint, machine.Decide{Phase: capsule.Execution, Cycle: 1, Holder: "a", Decision: halt}, t0.Add(3*time.Second))
	require.NoError(t, err)
	require.Len(t, res.Checkpoint.State.AttemptLog, 3)
	require.Equal(t, capsule.AttemptHalted, res.Checkpoint.State.AttemptLog[2].Decision)

	var kinds []capsule.EventKind
	ids := map[string]bool{}
	for _, ev := range machine.CheckpointEvents(res.Checkpoint) {
		kinds = append(kinds, ev.Kind)
		require.False(t, ids[ev.ID], "event ids are unique: %s", ev.ID)
		ids[ev.ID] = true
	}
	n := len(kinds)
	require.GreaterOrEqual(t, n, 4)
	require.Equal(t, []capsule.EventKind{capsule.EventAttemptFailed, capsule.EventAttemptFailed, capsule.EventAttemptFailed, capsule.EventHalted}, kinds[n-4:],
		"the failed attempts come before the halt they led to")
}
