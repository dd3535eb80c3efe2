package machine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
)

// TestEndPastDeadline: the sweeper's halt of a capsule past its deadline
// applies only to a parked capsule (paused on any trigger, waiting, waiting
// for an operator) whose deadline in force has passed at the event's time;
// it names the phase the capsule stands at, and a repeat finds it ended.
func TestEndPastDeadline(t *testing.T) {
	t.Parallel()
	deadline := t0.Add(-time.Second)
	ev := machine.End{State: capsule.Halted, IfDeadlinePassed: &deadline}
	waitingDeps := at(capsule.Waiting, capsule.AutomatedGates, 0)
	waitingDeps.State.Pause = &capsule.PauseInfo{Trigger: capsule.TriggerDependencies, At: t0}
	for name, tc := range map[string]struct {
		cp    *capsule.Checkpoint
		phase capsule.Phase
	}{
		"paused":               {paused(capsule.TriggerDeadlineApproaching, ""), capsule.Execution},
		"paused by a person":   {paused(capsule.TriggerOperatorManual, ""), capsule.Execution},
		"awaiting external":    {awaiting(), capsule.Execution},
		"waiting for operator": {waiting(), capsule.Handoff},
		"waiting":              {waitingDeps, capsule.AutomatedGates},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res, err := machine.Apply(tc.cp, ev, t0)
			require.NoError(t, err)
			st := res.Checkpoint.State
			require.Equal(t, capsule.Halted, st.Status)
			require.Equal(t, capsule.DeadlineExceeded(tc.phase).String(), st.HaltReason)
			require.Equal(t, "deadline_exceeded:"+tc.phase.String(), st.HaltReason)
			require.Equal(t, capsule.Halted, res.Effects.Outcome)
			require.Nil(t, st.Pause)

			_, err = machine.Apply(res.Checkpoint, ev, t0)
			require.ErrorIs(t, err, machine.ErrRefused, "a repeat finds it ended")
		})
	}

	_, err := machine.Apply(at(capsule.InProgress, capsule.Execution, 1), ev, t0)
	require.ErrorIs(t, err, machine.ErrRefused, "in progress: the phase's own check is the one")
	_, err = machine.Apply(paused(capsule.TriggerOperatorManual, ""), ev, deadline.Add(-time.Minute))
	require.ErrorIs(t, err, machine.ErrRefused, "not passed yet")
	cp := paused(capsule.TriggerDeadlineApproaching, "")
	later := t0.Add(time.Hour)
	cp.State.Overrides = &capsule.Overrides{Deadline: &later}
	_, err = machine.Apply(cp, ev, t0)
	require.ErrorIs(t, err, machine.ErrRefused, "an operator's new deadline counts")
}

// TestResumePastDeadlineNeedsANewOne: a person's resume of a capsule past
// its deadline is refused with a sentence unless it moves the deadline into
// the future; the sweeper's resume of a waiting capsule is not a person's.
func TestResumePastDeadlineNeedsANewOne(t *testing.T) {
	t.Parallel()
	due := t0.Add(-time.Minute)
	_, err := machine.Apply(paused(capsule.TriggerDeadlineApproaching, ""), machine.RequestResume{From: capsule.Paused, Token: "x", CapsuleDeadline: due}, t0)
	require.ErrorIs(t, err, machine.ErrRefused)
	require.ErrorContains(t, err, "its deadline passed at 2026-01-02T03:03:05Z: give it a new one with --deadline TIME or --extend DURATION")
	_, err = machine.Apply(waiting(), machine.RequestResume{Action: "accept", From: capsule.WaitingForOperator, Token: "x", CapsuleDeadline: due}, t0)
	require.ErrorIs(t, err, machine.ErrRefused, "an accept past the deadline too")
	require.ErrorContains(t, err, "its deadline passed at 2026-01-02T03:03:05Z: it halts deadline_exceeded")

	past := t0.Add(-time.Second)
	_, err = machine.Apply(paused(capsule.TriggerDeadlineApproaching, ""), machine.RequestResume{From: capsule.Paused, Token: "x", CapsuleDeadline: due, Deadline: &past}, t0)
	require.ErrorIs(t, err, machine.ErrRefused)
	require.ErrorContains(t, err, "is not in the future")

	next := t0.Add(time.Hour)
	res, err := machine.Apply(paused(capsule.TriggerDeadlineApproaching, ""), machine.RequestResume{From: capsule.Paused, Token: "x", CapsuleDeadline: due, Deadline: &next}, t0)
	require.NoError(t, err)
	require.Equal(t, next, *res.Checkpoint.State.Overrides.Deadline)

	w := at(capsule.Waiting, capsule.AutomatedGates, 0)
	w.State.Pause = &capsule.PauseInfo{Trigger: capsule.TriggerDependencies, At: t0}
	_, err = machine.Apply(w, machine.RequestResume{From: capsule.Waiting, Token: "x", CapsuleDeadline: due}, t0)
	require.NoError(t, err, "the sweeper halts it instead; its resume is not judged here")
}

// TestAcceptOverVerdict: an accept over a verdict other than APPROVED
// records the operator's approval of the cycle (the capsule's final
// artifact is its last approved cycle's), once, with who and over what;
// an accept over an approval records nothing more.
func TestAcceptOverVerdict(t *testing.T) {
	t.Parallel()
	cp := waiting()
	cp.State.Reviews[0].Verdict = capsule.ChangesRequested
	ev := machine.RequestResume{Action: "accept", From: capsule.WaitingForOperator, Token: "x", By: "dora"}
	res, err := machine.Apply(cp, ev, t0)
	require.NoError(t, err)
	reviews := res.Checkpoint.State.Reviews
	require.Len(t, reviews, 2)
	require.Equal(t, capsule.ReviewEntry{
		Cycle: 1, ReviewerID: "operator:dora", Verdict: capsule.Approved, At: t0,
		Findings: []capsule.Finding{{Message: "operator accepted over CHANGES_REQUESTED of rv"}},
	}, reviews[1])
	by, verdict, ok := machine.AcceptedOver(res.Checkpoint)
	require.True(t, ok)
	require.Equal(t, "dora", by)
	require.Equal(t, capsule.ChangesRequested, verdict)

	again, err := machine.Apply(res.Checkpoint, ev, t0)
	require.NoError(t, err)
	require.Len(t, again.Checkpoint.State.Reviews, 2, "a repeat finishes the accept in flight")

	approved, err := machine.Apply(waiting(), ev, t0)
	require.NoError(t, err)
	require.Len(t, approved.Checkpoint.State.Reviews, 1)
	_, _, ok = machine.AcceptedOver(approved.Checkpoint)
	require.False(t, ok)
}
