package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// dueIn sets the capsule's deadline d from now (RFC 3339: whole seconds).
func dueIn(doc capsuletest.Doc, d time.Duration) capsuletest.Doc {
	return doc.Set("deadline", time.Now().Add(d).UTC().Format(time.RFC3339))
}

// TestDeadlinePassesWhileWaitingForTheWave is issue 25's report: a capsule
// paused at deadline_approaching, resumed, then waiting for its wave's
// capacity must not run after its deadline. The sweeper halts it
// deadline_exceeded:AUTOMATED_GATES within its interval, before anything
// was spent.
func TestDeadlinePassesWhileWaitingForTheWave(t *testing.T) {
	t.Parallel()
	f := setupWith(t, func(c *pipeline.Config) { c.SweepInterval = 50 * time.Millisecond })
	ctx := context.Background()
	_, err := f.pipe.Store().Budgets.ChangeWave(ctx, "full", budget.WaveChange{Tokens: ptr(int64(1000))})
	require.NoError(t, err)
	// The wave's room is held by a capsule its executor keeps busy.
	holder := f.bundle.WaveDoc(t, "full", "slow")
	f.publish(t, holder.Sealed(t))
	f.bundle.EventuallyExecuted(t, 1)
	doc := dueIn(f.bundle.WaveDoc(t, "full", "stub"), 4*time.Second)
	f.publish(t, doc.Sealed(t))

	f.waitState(t, doc.ID(), capsule.Paused)
	cp, _, err := f.pipe.Store().Checkpoints.Get(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.TriggerDeadlineApproaching, cp.State.Pause.Trigger)
	_, err = f.admin(t).Resume(ctx, doc.ID(), admin.ResumeOptions{By: "dora", Reason: "it will make it"})
	require.NoError(t, err, "its deadline has not passed yet")
	w := f.waitState(t, doc.ID(), capsule.Waiting)
	require.Equal(t, "wave_capacity", w.WaitingOn)

	s := f.wait(t, doc.ID())
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, capsule.DeadlineExceeded(capsule.AutomatedGates).String(), s.HaltReason)
	require.Equal(t, int64(1), f.executed.Load(), "no agent call after the deadline")
	requireOutcomes(t, f, 1)
	f.gate <- struct{}{}
	require.Equal(t, capsule.Completed, f.wait(t, holder.ID()).State)
}

// TestWaveTooSmallNeedsAPerson: a capsule whose caps exceed its wave's
// whole cap can never fit by waiting: it waits on wave_too_small, listed
// in pending (and so the console's inbox) with what to do, and goes on
// once a person raises the cap.
func TestWaveTooSmallNeedsAPerson(t *testing.T) {
	t.Parallel()
	f := setupWith(t, func(c *pipeline.Config) { c.SweepInterval = 50 * time.Millisecond })
	ctx := context.Background()
	_, err := f.pipe.Store().Budgets.ChangeWave(ctx, "small", budget.WaveChange{Tokens: ptr(int64(500))})
	require.NoError(t, err)
	doc := f.bundle.WaveDoc(t, "small", "stub")
	f.publish(t, doc.Sealed(t))
	w := f.waitState(t, doc.ID(), capsule.Waiting)
	require.Equal(t, string(capsule.TriggerWaveTooSmall), w.WaitingOn)

	pending, err := f.admin(t).Pending(ctx)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, doc.ID(), pending[0].CapsuleID)
	require.Equal(t, capsule.Waiting, pending[0].State)
	require.Equal(t, capsule.TriggerWaveTooSmall, pending[0].Trigger)
	require.Contains(t, pending[0].Reason, "more than the wave's whole cap")

	_, err = f.admin(t).Pause(ctx, doc.ID(), "look", "dora")
	require.ErrorIs(t, err, admin.ErrRefused)

	_, err = f.pipe.Store().Budgets.ChangeWave(ctx, "small", budget.WaveChange{Tokens: ptr(int64(2000))})
	require.NoError(t, err)
	require.Equal(t, capsule.Completed, f.wait(t, doc.ID()).State)
}

// TestChainStepDeadlineWhileWaitingForDependency: a step's deadline is its
// own capsule's, however long ago it was published: a step that waits for
// the step before it halts deadline_exceeded once its deadline passes. The
// step before, waiting for the operator, goes on when accepted.
func TestChainStepDeadlineWhileWaitingForDependency(t *testing.T) {
	t.Parallel()
	f := setupWith(t, func(c *pipeline.Config) {
		c.SweepInterval = 50 * time.Millisecond
		c.DeadlineWarning = -1 // straight to the wait, no deadline_approaching pause
	})
	ctx := context.Background()
	first := f.own(t, capsuletest.New().Set("review.operator_gate", true))
	second := dueIn(f.own(t, capsuletest.New().Set("depends_on", []any{first.ID()})), 3*time.Second)
	f.publish(t, first.Sealed(t))
	f.publish(t, second.Sealed(t))
	f.waitState(t, first.ID(), capsule.WaitingForOperator)

	s := f.wait(t, second.ID())
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, capsule.DeadlineExceeded(capsule.AutomatedGates).String(), s.HaltReason)

	_, err := f.admin(t).Decide(ctx, first.ID(), admin.DecisionAccept, "fine", "dora")
	require.NoError(t, err)
	require.Equal(t, capsule.Completed, f.wait(t, first.ID()).State)
	require.Equal(t, int64(1), f.executed.Load(), "only the first step ran")
}

// TestResumePastDeadline: a person's resume of a capsule whose deadline
// passed is refused with a sentence, unless it gives a new deadline
// (sagactl resume --deadline, or --extend, which the CLI turns into one).
func TestResumePastDeadline(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	// A capsule paused by its operator, seen by an admin whose clock is
	// past the capsule's deadline (the pipeline's sweeper, on the real
	// clock, leaves it be).
	paused := f.own(t, capsuletest.New().Set("task.kind", "slow"))
	f.publish(t, paused.Sealed(t))
	f.bundle.EventuallyExecuted(t, 1)
	a := f.admin(t)
	_, err := a.Pause(ctx, paused.ID(), "look", "dora")
	require.NoError(t, err)
	f.gate <- struct{}{}
	f.waitState(t, paused.ID(), capsule.Paused)

	later := func() time.Time { return time.Now().Add(2 * time.Hour) }
	late := admin.New(f.pipe.Store(), admin.Config{Now: later})
	_, err = late.Resume(ctx, paused.ID(), admin.ResumeOptions{By: "dora"})
	require.ErrorIs(t, err, admin.ErrRefused)
	require.ErrorContains(t, err, "its deadline passed at")
	require.ErrorContains(t, err, "--extend")

	past := later().Add(-time.Minute)
	_, err = late.Resume(ctx, paused.ID(), admin.ResumeOptions{By: "dora", Deadline: &past})
	require.ErrorIs(t, err, admin.ErrRefused, "a new deadline in the past is no deadline")
	require.ErrorContains(t, err, "is not in the future")

	// --extend 1h: an hour from sagad's now.
	_, err = late.Resume(ctx, paused.ID(), admin.ResumeOptions{By: "dora", Extend: time.Hour})
	require.NoError(t, err)
	cp, _, err := f.pipe.Store().Checkpoints.Get(ctx, paused.ID())
	require.NoError(t, err)
	require.NotNil(t, cp.State.Overrides)
	require.WithinDuration(t, later().Add(time.Hour), *cp.State.Overrides.Deadline, time.Minute)
	s := f.wait(t, paused.ID())
	require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)
}

// TestAcceptOverChangesRequestedIsFinal is issue 25's report: with
// operator_gate "all", accepting a CHANGES_REQUESTED makes the cycle's
// artifact the capsule's final one, so the chain's next step (which reads
// artifact:<id>/final) runs; the outcome and the history say who accepted
// over what.
func TestAcceptOverChangesRequestedIsFinal(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	first := f.own(t, capsuletest.New().Set("review.operator_gate", "all").
		Stub(map[string]any{"reviews": []any{"CHANGES_REQUESTED"}}))
	second := f.own(t, capsuletest.New().Set("depends_on", []any{first.ID()}))
	second = second.Set("context_refs", append(second["context_refs"].([]any), "artifact:"+first.ID()+"/final"))
	f.publish(t, first.Sealed(t))
	f.publish(t, second.Sealed(t))
	f.waitState(t, first.ID(), capsule.WaitingForOperator)

	_, err := f.admin(t).Decide(ctx, first.ID(), admin.DecisionAccept, "good enough", "dora")
	require.NoError(t, err)
	s := f.wait(t, first.ID())
	require.Equal(t, capsule.Completed, s.State)
	cp, _, err := f.pipe.Store().Checkpoints.Get(ctx, first.ID())
	require.NoError(t, err)
	final, ok := store.FinalArtifactRef(cp)
	require.True(t, ok, "accept makes a final artifact")
	require.Equal(t, store.ArtifactRef(first.ID(), 1), final)

	next := f.wait(t, second.ID())
	require.Equal(t, capsule.Completed, next.State, "the next step runs: %s", next.HaltReason)

	events, err := f.client.History(ctx, first.ID())
	require.NoError(t, err)
	var accepted bool
	for _, e := range events {
		if e.Kind == capsule.EventOperatorAccepted {
			accepted = true
			require.Equal(t, "dora", e.By)
			require.True(t, strings.Contains(e.Detail, "accepted over CHANGES_REQUESTED by dora"), e.Detail)
		}
	}
	require.True(t, accepted, "the history records the accept")

	outcomes, err := f.js.Stream(ctx, store.OutcomesStream)
	require.NoError(t, err)
	found := false
	for seq := uint64(1); seq <= 2; seq++ {
		m, err := outcomes.GetMsg(ctx, seq)
		require.NoError(t, err)
		if m.Header.Get(store.HeaderKey) == first.ID() {
			found = true
			require.Equal(t, "CHANGES_REQUESTED by dora", m.Header.Get(store.HeaderAcceptedOver))
		}
	}
	require.True(t, found, "the first step's outcome")
}
