package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/sagatest"
	"github.com/sagad/sagad/store"
)

// atPlanning runs a pipeline with PLANNING paused and publishes a capsule
// that then stands in_progress at PLANNING, its step queued, until the
// phase is resumed.
func atPlanning(t *testing.T) (*sagatest.Bundle, *admin.Admin, capsuletest.Doc) {
	t.Helper()
	f := sagatest.Run(t, nil)
	a := f.Admin(t)
	ctx := context.Background()
	require.NoError(t, a.PausePhase(ctx, capsule.Planning))
	doc := f.Own(t, capsuletest.New())
	f.Publish(t, doc.Sealed(t))
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		s, err := f.Client.Status(ctx, doc.ID())
		return err == nil && s.Phase == int(capsule.Planning) && s.State == capsule.InProgress
	}, "the capsule never reached PLANNING")
	return f, a, doc
}

// requireRefused requires err to be the machine's refusal of action on a
// capsule in state.
func requireRefused(t *testing.T, err error, action string, state capsule.State) {
	t.Helper()
	require.ErrorIs(t, err, machine.ErrRefused)
	var r *admin.StateError
	require.True(t, errors.As(err, &r), "a typed refusal: %v", err)
	require.Equal(t, action, r.Event)
	require.Equal(t, state, r.State)
}

// TestPauseResumeAsEvents: an operator's pause parks the capsule with
// operator_manual, lists it as pending with who and why, and is recorded as
// a paused event; a second pause changes nothing; a decision on a capsule
// that does not wait for one, and an unknown decision, are refused; resume
// takes it on, and it completes once its phase runs again.
func TestPauseResumeAsEvents(t *testing.T) {
	t.Parallel()
	f, a, doc := atPlanning(t)
	ctx := context.Background()

	phases, err := a.Phases(ctx)
	require.NoError(t, err)
	for _, p := range phases {
		require.Equal(t, p.Phase == int(capsule.Planning), p.Paused, "only PLANNING is paused: %+v", p)
	}

	_, err = a.Pause(ctx, doc.ID(), "look at it", "alice")
	require.NoError(t, err)
	s := f.WaitState(t, doc.ID(), capsule.Paused)
	pending, err := a.Pending(ctx)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, doc.ID(), pending[0].CapsuleID)
	require.Equal(t, capsule.TriggerOperatorManual, pending[0].Trigger)
	require.Equal(t, "look at it", pending[0].Reason)
	require.Equal(t, "alice", pending[0].By)

	_, err = a.Pause(ctx, doc.ID(), "again", "bob")
	require.NoError(t, err, "pausing a paused capsule changes nothing")
	cp, err := f.Client.Checkpoint(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, "alice", cp.State.Pause.By, "the first pause stands")
	require.Equal(t, s.History, f.WaitState(t, doc.ID(), capsule.Paused).History)

	_, err = a.Decide(ctx, doc.ID(), admin.DecisionAccept, "fine", "carol")
	requireRefused(t, err, "accept", capsule.Paused)
	_, err = a.Decide(ctx, doc.ID(), admin.DecisionReject, "no", "carol")
	requireRefused(t, err, "reject", capsule.Paused)
	_, err = a.Decide(ctx, doc.ID(), "maybe", "", "carol")
	require.ErrorContains(t, err, `decision "maybe"`)

	_, err = a.Resume(ctx, doc.ID(), admin.ResumeOptions{By: "bob", Reason: "looked"})
	require.NoError(t, err)
	require.NoError(t, a.ResumePhase(ctx, capsule.Planning))
	done := f.Wait(t, doc.ID())
	require.Equal(t, capsule.Completed, done.State)
	require.Equal(t, int64(1), f.Executed.Load())

	kinds := f.CountEvents(t, doc.ID())
	require.Equal(t, 1, kinds[capsule.EventPaused])
	require.Equal(t, 1, kinds[capsule.EventResumed])
	require.Equal(t, 1, kinds[capsule.EventCompleted])

	// An ended capsule refuses every action that would move it.
	_, err = a.Pause(ctx, doc.ID(), "late", "alice")
	requireRefused(t, err, "pause", capsule.Completed)
	_, err = a.Resume(ctx, doc.ID(), admin.ResumeOptions{By: "alice"})
	requireRefused(t, err, "resume", capsule.Completed)
	_, err = a.Cancel(ctx, doc.ID(), "late", "alice")
	requireRefused(t, err, "cancel", capsule.Completed)
	f.RequireOutcomes(t, 1, "refusals emit nothing")
}

// TestCancelEndsWhereItStands: a cancel ends a capsule whose step is still
// queued, emits its outcome once and records who cancelled; a second cancel
// changes nothing, a resume is refused, and the queued step, once its phase
// runs, calls no executor.
func TestCancelEndsWhereItStands(t *testing.T) {
	t.Parallel()
	f, a, doc := atPlanning(t)
	ctx := context.Background()

	_, err := a.Cancel(ctx, doc.ID(), "no longer needed", "carol")
	require.NoError(t, err)
	s := f.WaitState(t, doc.ID(), capsule.Cancelled)
	f.RequireOutcomes(t, 1)
	require.Equal(t, 1, f.CountEvents(t, doc.ID())[capsule.EventCancelled])

	_, err = a.Cancel(ctx, doc.ID(), "twice", "carol")
	require.NoError(t, err, "cancelling a cancelled capsule changes nothing")
	_, err = a.Resume(ctx, doc.ID(), admin.ResumeOptions{By: "dave"})
	requireRefused(t, err, "resume", capsule.Cancelled)

	require.NoError(t, a.ResumePhase(ctx, capsule.Planning))
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		ps, err := a.Phases(ctx)
		if err != nil {
			return false
		}
		for _, p := range ps {
			if p.Phase == int(capsule.Planning) && (p.Paused || p.Pending > 0 || p.AckPending > 0) {
				return false
			}
		}
		return true
	}, "PLANNING's queued step handled")
	after := f.WaitState(t, doc.ID(), capsule.Cancelled)
	require.Equal(t, s.History, after.History, "the queued step changed nothing")
	require.Equal(t, int64(0), f.Executed.Load())
	f.RequireOutcomes(t, 1, "the cancel's outcome once")
}

// TestUnknownCapsule: every action on an id sagad does not know is
// store.ErrNotFound, and changes nothing.
func TestUnknownCapsule(t *testing.T) {
	t.Parallel()
	f := sagatest.Setup(t)
	a := f.Admin(t)
	ctx := context.Background()
	id := capsuletest.NewID()
	_, err := a.Pause(ctx, id, "r", "alice")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = a.Resume(ctx, id, admin.ResumeOptions{By: "alice"})
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = a.Cancel(ctx, id, "r", "alice")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = a.Decide(ctx, id, admin.DecisionRevise, "r", "alice")
	require.ErrorIs(t, err, store.ErrNotFound)
	pending, err := a.Pending(ctx)
	require.NoError(t, err)
	require.Empty(t, pending)
}

// TestWaveOps: a wave set with caps reports them and what is left; a nil
// cap keeps its value; closing is final — the wave reports closed, closing
// again changes nothing, and changing its caps is refused. A wave never
// set is store.ErrNotFound, and a malformed id is invalid.
func TestWaveOps(t *testing.T) {
	t.Parallel()
	f := sagatest.Setup(t)
	a := f.Admin(t)
	ctx := context.Background()

	tokens, dollars := int64(3000), 1.5
	w, err := a.SetWave(ctx, "wave-1", &tokens, &dollars, nil)
	require.NoError(t, err)
	require.Equal(t, tokens, w.TokensCap)
	require.Equal(t, dollars, w.DollarsCap)
	require.NotNil(t, w.TokensLeft)
	require.Equal(t, tokens, *w.TokensLeft)
	require.False(t, w.Closed)

	more := int64(5000)
	w, err = a.SetWave(ctx, "wave-1", &more, nil, nil)
	require.NoError(t, err)
	require.Equal(t, more, w.TokensCap)
	require.Equal(t, dollars, w.DollarsCap, "a nil cap stays as it is")

	got, err := a.Wave(ctx, "wave-1")
	require.NoError(t, err)
	require.Equal(t, w.TokensCap, got.TokensCap)
	all, err := a.Waves(ctx)
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.Equal(t, "wave-1", all[0].WaveID)

	w, err = a.CloseWave(ctx, "wave-1")
	require.NoError(t, err)
	require.True(t, w.Closed)
	w, err = a.CloseWave(ctx, "wave-1")
	require.NoError(t, err, "closing a closed wave changes nothing")
	require.True(t, w.Closed)
	_, err = a.SetWave(ctx, "wave-1", &tokens, nil, nil)
	require.ErrorIs(t, err, admin.ErrRefused)

	_, err = a.Wave(ctx, "never-set")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = a.Wave(ctx, "not a wave id")
	require.ErrorIs(t, err, admin.ErrInvalidWave)
}
