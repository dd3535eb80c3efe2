package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/locks"
	"github.com/sagad/sagad/sagatest"
	"github.com/sagad/sagad/schemas"
)

// TestPauseQueuedThenResume: a capsule paused while queued parks at its phase
// and, resumed, runs every phase exactly once.
func TestPauseQueuedThenResume(t *testing.T) {
	t.Parallel()
	f := sagatest.Run(t, nil)
	a := f.Admin(t)
	ctx := context.Background()
	require.NoError(t, a.PausePhase(ctx, capsule.Planning))
	doc := f.Own(t, capsuletest.New())
	f.Publish(t, doc.Sealed(t))
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		s, err := f.Client.Status(ctx, doc.ID())
		return err == nil && s.Phase == int(capsule.Planning)
	}, "queued at PLANNING")

	s, err := a.Pause(ctx, doc.ID(), "look first", "alice")
	require.NoError(t, err)
	require.Equal(t, capsule.Paused, s.State)
	again, err := a.Pause(ctx, doc.ID(), "twice", "alice")
	require.NoError(t, err, "pausing a paused capsule is a no-op")
	require.Equal(t, capsule.Paused, again.State)
	require.NoError(t, a.ResumePhase(ctx, capsule.Planning))
	f.WaitDrained(t) // the queued message was delivered and dropped
	s = f.WaitState(t, doc.ID(), capsule.Paused)
	require.Equal(t, int(capsule.Planning), s.Phase)
	f.RequireContinuation(t, doc.ID(), capsule.TriggerOperatorManual, capsule.Planning)

	pending, err := a.Pending(ctx)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, capsule.TriggerOperatorManual, pending[0].Trigger)

	_, err = a.Resume(ctx, doc.ID(), admin.ResumeOptions{By: "bob", Reason: "go"})
	require.NoError(t, err)
	s = f.Wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State)
	require.Len(t, s.History, 7)
	require.Equal(t, int64(1), f.Executed.Load())
	f.RequireNoContinuation(t, doc.ID())
	kinds := f.EventKinds(t, doc.ID())
	require.Contains(t, kinds, capsule.EventPaused)
	require.Contains(t, kinds, capsule.EventResumed)
	events, err := f.Client.History(ctx, doc.ID())
	require.NoError(t, err)
	for _, e := range events {
		if e.Kind == capsule.EventResumed {
			require.Equal(t, "bob", e.By)
		}
		if e.Kind == capsule.EventPaused {
			require.Equal(t, "alice", e.By)
		}
	}
	_, err = a.Resume(ctx, doc.ID(), admin.ResumeOptions{})
	require.ErrorIs(t, err, admin.ErrRefused)
}

// TestPauseInsidePhase: a pause while the executor runs lets EXECUTION record
// its result, then parks at REVIEW; resume never re-runs the executor.
func TestPauseInsidePhase(t *testing.T) {
	t.Parallel()
	f := sagatest.Run(t, nil)
	a := f.Admin(t)
	ctx := context.Background()
	doc := f.Own(t, capsuletest.New().Set("task.kind", "slow"))
	f.Publish(t, doc.Sealed(t))
	f.EventuallyExecuted(t, 1)
	_, err := a.Pause(ctx, doc.ID(), "", "alice")
	require.NoError(t, err)
	f.Gate <- struct{}{}
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		s, err := f.Client.Status(ctx, doc.ID())
		return err == nil && s.State == capsule.Paused && s.Phase == int(capsule.ReviewPhase)
	}, "parked at REVIEW")
	cp, err := f.Client.Checkpoint(ctx, doc.ID())
	require.NoError(t, err)
	require.NotNil(t, cp.State.Result)
	require.NoError(t, schemas.ValidateValue(schemas.Checkpoint, cp))
	f.RequireContinuation(t, doc.ID(), capsule.TriggerOperatorManual, capsule.ReviewPhase)

	_, err = a.Resume(ctx, doc.ID(), admin.ResumeOptions{By: "bob"})
	require.NoError(t, err)
	s := f.Wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State)
	require.Equal(t, int64(1), f.Executed.Load())
	require.Len(t, s.History, 7)
}

// TestCancelWhileExecuting ends the capsule cancelled and frees its locks;
// the executor's late result changes nothing.
func TestCancelWhileExecuting(t *testing.T) {
	t.Parallel()
	f := sagatest.Run(t, nil)
	a := f.Admin(t)
	ctx := context.Background()
	doc := f.Own(t, capsuletest.New().Set("task.kind", "slow"))
	f.Publish(t, doc.Sealed(t))
	f.EventuallyExecuted(t, 1)
	s, err := a.Cancel(ctx, doc.ID(), "not needed", "alice")
	require.NoError(t, err)
	require.Equal(t, capsule.Cancelled, s.State)
	lm, err := locks.New(ctx, f.JS, locks.Config{})
	require.NoError(t, err)
	lockPath := "own-" + doc.ID() + ".txt"
	holder, err := lm.Holder(ctx, lockPath)
	require.NoError(t, err)
	require.Empty(t, holder, "cancel releases the locks")
	// Let the executor finish, unless its run already stopped: the
	// heartbeat that finds the claim gone cancels it, and it then never
	// reads the gate.
	select {
	case f.Gate <- struct{}{}:
	case <-time.After(5 * time.Second):
	}
	f.WaitDrained(t)
	s, err = f.Client.Status(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.Cancelled, s.State)
	require.Equal(t, capsule.OutcomeCancelled, s.History[len(s.History)-1].Outcome)
	f.RequireOutcomes(t, 1)
	_, err = a.Cancel(ctx, doc.ID(), "again", "alice")
	require.NoError(t, err, "cancel is idempotent")
	_, err = a.Pause(ctx, doc.ID(), "", "alice")
	require.ErrorIs(t, err, admin.ErrRefused)
}

// TestOperatorGate: accept goes to HANDOFF; revise loops to EXECUTION as a new
// cycle with the rationale; a decision on a capsule not waiting is refused.
func TestOperatorGate(t *testing.T) {
	t.Parallel()
	f := sagatest.Run(t, nil)
	a := f.Admin(t)
	ctx := context.Background()
	doc := f.Own(t, capsuletest.New().Set("review.operator_gate", true))
	f.Publish(t, doc.Sealed(t))
	s := f.WaitState(t, doc.ID(), capsule.WaitingForOperator)
	require.Equal(t, int(capsule.Handoff), s.Phase)
	pending, err := a.Pending(ctx)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, capsule.WaitingForOperator, pending[0].State)

	_, err = a.Resume(ctx, doc.ID(), admin.ResumeOptions{})
	require.ErrorIs(t, err, admin.ErrRefused, "resume is not a decision")
	_, err = a.Pause(ctx, doc.ID(), "", "x")
	require.ErrorIs(t, err, admin.ErrRefused)

	s, err = a.Decide(ctx, doc.ID(), admin.DecisionRevise, "tighten the wording", "carol")
	require.NoError(t, err)
	require.Equal(t, capsule.InProgress, s.State)
	s = f.WaitState(t, doc.ID(), capsule.WaitingForOperator)
	require.Equal(t, 2, s.CyclesUsed)
	s, err = a.Decide(ctx, doc.ID(), admin.DecisionAccept, "good now", "carol")
	require.NoError(t, err)
	s = f.Wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State)
	require.Equal(t, 2, s.CyclesUsed)
	require.Equal(t, int64(2), f.Executed.Load())

	events, err := f.Client.History(ctx, doc.ID())
	require.NoError(t, err)
	var revision *capsule.Event
	for i, e := range events {
		if e.Kind == capsule.EventRevisionTriggered {
			revision = &events[i]
		}
	}
	require.NotNil(t, revision)
	require.Equal(t, "tighten the wording", revision.Detail)
	require.Equal(t, "carol", revision.By)

	before, err := f.Client.Status(ctx, doc.ID())
	require.NoError(t, err)
	_, err = a.Decide(ctx, doc.ID(), admin.DecisionAccept, "", "carol")
	require.ErrorIs(t, err, admin.ErrRefused)
	after, err := f.Client.Status(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, before, after, "a refused decision changes nothing")
}

// TestReviseAtLastCycleHalts: Rule 12 applies to operator revisions too.
func TestReviseAtLastCycleHalts(t *testing.T) {
	t.Parallel()
	f := sagatest.Run(t, nil)
	a := f.Admin(t)
	ctx := context.Background()
	doc := f.Own(t, capsuletest.New().Set("review.operator_gate", true).Set("review.max_cycles", 1))
	f.Publish(t, doc.Sealed(t))
	f.WaitState(t, doc.ID(), capsule.WaitingForOperator)
	s, err := a.Decide(ctx, doc.ID(), admin.DecisionRevise, "again", "carol")
	require.NoError(t, err)
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, "max_cycles_exceeded:1", s.HaltReason)
}

// TestOperatorPauseOverAcceptedWork: resume refuses a capsule still waiting
// for accepted work unless forced; an operator pause taken meanwhile keeps
// the capsule paused when the result arrives, and resume then uses it.
func TestOperatorPauseOverAcceptedWork(t *testing.T) {
	t.Parallel()
	f := sagatest.Run(t, nil)
	a := f.Admin(t)
	ctx := context.Background()
	doc := f.Own(t, capsuletest.New().Set("task.kind", "accepting"))
	f.Publish(t, doc.Sealed(t))
	f.WaitState(t, doc.ID(), capsule.Paused)
	_, err := a.Resume(ctx, doc.ID(), admin.ResumeOptions{})
	require.ErrorIs(t, err, admin.ErrRefused)

	s, err := a.Pause(ctx, doc.ID(), "hold it", "alice")
	require.NoError(t, err)
	cp, err := f.Client.Checkpoint(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.TriggerOperatorManual, cp.State.Pause.Trigger)
	require.Equal(t, capsule.Paused, s.State)

	result := f.Completion(t, `{"kind":"execute","status":"ok","content":{"answer":7},"usage":{"tokens":5,"dollars":0.001}}`)
	_, err = f.JS.Publish(ctx, executors.CompletionSubject(doc.ID(), 1), result)
	require.NoError(t, err)
	f.WaitCompletionsDrained(t)
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		cp, err := f.Client.Checkpoint(ctx, doc.ID())
		return err == nil && cp.State.Result != nil && cp.State.Result.Cycle == 1
	}, "result recorded")
	s, err = f.Client.Status(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.Paused, s.State, "the operator's pause stands")

	_, err = a.Resume(ctx, doc.ID(), admin.ResumeOptions{By: "alice"})
	require.NoError(t, err)
	f.WaitState(t, doc.ID(), capsule.Completed)
	require.Equal(t, int64(1), f.Executed.Load())
}
