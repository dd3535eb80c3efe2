package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// queued waits until phase ph's consumer holds n messages not yet taken.
func queued(t *testing.T, f *fixture, ph capsule.Phase, n uint64) {
	t.Helper()
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		info := phaseConsumer(t, f, ph)
		return info.NumPending == n && info.NumAckPending == 0
	}, "%s never held %d messages", ph, n)
}

// requireSevenPhases checks a completed capsule's history: every phase
// once, in order, in time order.
func requireSevenPhases(t *testing.T, s client.Status) {
	t.Helper()
	require.Equal(t, capsule.Completed, s.State)
	require.Len(t, s.History, 7)
	for i, h := range s.History {
		require.Equal(t, i, h.Phase, "history %d", i)
		if i > 0 {
			require.False(t, h.At.Before(s.History[i-1].At), "%s recorded before %s", h.PhaseName, s.History[i-1].PhaseName)
		}
	}
}

// TestDeferredPlanningSurvivesACrash: PLANNING's advance is written with
// AUTOMATED_GATES' first write, and both with EXECUTION's claim. While
// AUTOMATED_GATES (or EXECUTION) is paused, the checkpoint still stands at
// PLANNING with the message naming the deferred advances queued; a sagad
// that dies there and one started afterwards resume from what was written,
// and the history shows every phase. The pause is one sagad has not seen
// (NoPauseView): one it has seen is written (TestDeferredNotIntoAPausedPhase).
func TestDeferredPlanningSurvivesACrash(t *testing.T) {
	t.Parallel()
	for _, ph := range []capsule.Phase{capsule.AutomatedGates, capsule.Execution} {
		t.Run(ph.String(), func(t *testing.T) {
			t.Parallel()
			f := setupWith(t, func(c *pipeline.Config) { c.NoPauseView = true })
			ctx := context.Background()
			a := f.admin(t)
			require.NoError(t, a.PausePhase(ctx, ph))
			raw := capsuletest.New().Sealed(t)
			id := idOf(t, raw)
			f.publish(t, raw)
			queued(t, f, ph, 1)
			s, err := f.client.Status(ctx, id)
			require.NoError(t, err)
			require.Equal(t, capsule.InProgress, s.State)
			require.Equal(t, int(capsule.RealityAnchor), s.Phase, "the deferred advances are not written yet")
			require.Len(t, s.History, 1)

			stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			f.pipe.Stop(stopCtx)
			cancel()
			f.pipe = f.start(t, f.cfg)
			require.NoError(t, a.ResumePhase(ctx, ph))
			requireSevenPhases(t, f.wait(t, id))
			require.Equal(t, int64(1), f.executed.Load())
			requireOutcomes(t, f, 1)
		})
	}
}

// TestDeferredGatesOnlyWhenPure: AUTOMATED_GATES writes its advance itself
// when more than the capsule's bytes decided it (here a wave reservation):
// the capsule queued at a paused EXECUTION stands at EXECUTION.
func TestDeferredGatesOnlyWhenPure(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	a := f.admin(t)
	require.NoError(t, a.PausePhase(ctx, capsule.Execution))
	d := f.own(t, capsuletest.New().Set("wave_id", "wave-pure"))
	f.publish(t, d.Sealed(t))
	queued(t, f, capsule.Execution, 1)
	s, err := f.client.Status(ctx, d.ID())
	require.NoError(t, err)
	require.Equal(t, int(capsule.Execution), s.Phase)
	require.Len(t, s.History, 4)
	require.NoError(t, a.ResumePhase(ctx, capsule.Execution))
	requireSevenPhases(t, f.wait(t, d.ID()))
}

// TestDeferredPlanningHeldByAPause: a capsule a person paused while the
// message naming its deferred advance was queued stays paused when that
// message is taken (the checkpoint decides, not the message), and runs on
// from PLANNING once resumed. The phase's pause is one sagad has not seen.
func TestDeferredPlanningHeldByAPause(t *testing.T) {
	t.Parallel()
	f := setupWith(t, func(c *pipeline.Config) { c.NoPauseView = true })
	ctx := context.Background()
	a := f.admin(t)
	require.NoError(t, a.PausePhase(ctx, capsule.AutomatedGates))
	raw := capsuletest.New().Sealed(t)
	id := idOf(t, raw)
	f.publish(t, raw)
	queued(t, f, capsule.AutomatedGates, 1)
	_, err := a.Pause(ctx, id, "look first", "alice")
	require.NoError(t, err)
	require.NoError(t, a.ResumePhase(ctx, capsule.AutomatedGates))
	queued(t, f, capsule.AutomatedGates, 0)
	s, err := f.client.Status(ctx, id)
	require.NoError(t, err)
	require.Equal(t, capsule.Paused, s.State)
	require.Equal(t, int(capsule.RealityAnchor), s.Phase)
	require.Len(t, s.History, 1, "the deferred advances were not written over the pause")

	_, err = a.Resume(ctx, id, admin.ResumeOptions{})
	require.NoError(t, err)
	requireSevenPhases(t, f.wait(t, id))
	require.Equal(t, int64(1), f.executed.Load())
	requireOutcomes(t, f, 1)
}

// TestDeferredPlanningAsWritten holds the deferral to the routine it
// replaces (pipeline.Config.NoDefer: PLANNING writes its advance): the same
// capsule ends the same way with the same history, one checkpoint write
// fewer for each of REALITY_ANCHOR, PLANNING and AUTOMATED_GATES, and one
// for REVIEW's claim (TestReviewClaimAsWritten).
func TestDeferredPlanningAsWritten(t *testing.T) {
	t.Parallel()
	written, writesWritten := checkpointWrites(t, true, capsuletest.New())
	deferred, writesDeferred := checkpointWrites(t, false, capsuletest.New())
	requireSevenPhases(t, written)
	requireSevenPhases(t, deferred)
	requireSameHistory(t, written, deferred)
	require.Equal(t, writesWritten-3-1, writesDeferred, "REALITY_ANCHOR's, PLANNING's and AUTOMATED_GATES' advances and REVIEW's claim cost no write of their own")
}

// checkpointWrites runs the capsule of doc to its end on a pipeline of its
// own (NoDefer: the reference routine) and counts the writes of its
// checkpoint.
func checkpointWrites(t *testing.T, noDefer bool, doc capsuletest.Doc) (client.Status, int) {
	t.Helper()
	// Heartbeats far apart: a claim renewed while a phase runs long under
	// load would be one write more in one run and not the other.
	f := setupWith(t, func(c *pipeline.Config) { c.NoDefer, c.Heartbeat, c.AckWait = noDefer, 10*time.Second, 30*time.Second })
	raw := doc.Sealed(t)
	id := idOf(t, raw)
	seen := watchWrites(t, f, id)
	f.publish(t, raw)
	s := f.wait(t, id)
	return s, len(seen())
}

// watchWrites subscribes to the capsule's checkpoint subject, on which
// every write is published (an accepted one and one that lost its
// compare-and-set alike), and returns what reports the writes seen so far.
// It reads up to a marker it publishes then: the server delivers the
// writes made before, already acknowledged to their writer, ahead of it,
// where a look at the subscription's queue might still miss the last.
func watchWrites(t *testing.T, f *fixture, id string) func() []*nats.Msg {
	t.Helper()
	nc, _ := natstest.Connect(t, f.srv)
	ch := make(chan *nats.Msg, 256)
	marker := "_test.marker." + nuid.Next()
	for _, subj := range []string{"$KV." + store.CheckpointsBucket + "." + id, marker} {
		_, err := nc.ChanSubscribe(subj, ch)
		require.NoError(t, err)
	}
	require.NoError(t, nc.Flush())
	var writes []*nats.Msg
	return func() []*nats.Msg {
		t.Helper()
		require.NoError(t, nc.Publish(marker, nil))
		timeout := time.After(10 * time.Second)
		for {
			select {
			case m := <-ch:
				if m.Subject == marker {
					return writes
				}
				writes = append(writes, m)
			case <-timeout:
				require.FailNow(t, "the marker never came back")
			}
		}
	}
}

// requireSameHistory checks that two runs of a capsule ended the same way
// with the same history.
func requireSameHistory(t *testing.T, want, got client.Status) {
	t.Helper()
	require.Equal(t, want.State, got.State)
	require.Equal(t, want.HaltReason, got.HaltReason)
	require.Len(t, got.History, len(want.History))
	for i := range want.History {
		w, d := want.History[i], got.History[i]
		require.Equal(t, []any{w.Phase, w.Cycle, w.Outcome, w.Detail}, []any{d.Phase, d.Cycle, d.Outcome, d.Detail})
	}
}

// TestDeferredHeaderIsNotTrusted: a phase message naming a deferred advance
// the phase would not make (forged, or a decision that changed) advances
// nothing: the receiving phase decides the deferred phase itself and writes
// what it decides, here PLANNING's halt, once.
func TestDeferredHeaderIsNotTrusted(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	// The pipeline's own admin: its pause view has the pause at once, so
	// the checkpoint is written at the paused PLANNING.
	a := f.pipe.Admin()
	require.NoError(t, a.PausePhase(ctx, capsule.Planning))
	raw := capsuletest.New().Set("spec.approved", false).Sealed(t)
	id := idOf(t, raw)
	f.publish(t, raw)
	queued(t, f, capsule.Planning, 1)
	st, err := store.Open(ctx, f.js)
	require.NoError(t, err)
	cp, _, err := st.Checkpoints.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, capsule.Planning, cp.State.Phase)
	next := cp.Clone()
	next.State.Phase = capsule.AutomatedGates
	forged := store.EncodeDeferredMsg(next, []store.Deferred{{Phase: capsule.Planning, At: time.Now()}})
	_, err = f.js.PublishMsg(ctx, forged)
	require.NoError(t, err)
	s := f.wait(t, id)
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, "spec_not_approved:[approved]", s.HaltReason)
	require.Len(t, s.History, 3)
	require.NoError(t, a.ResumePhase(ctx, capsule.Planning))
	queued(t, f, capsule.Planning, 0)
	requireOutcomes(t, f, 1)
	require.Zero(t, f.executed.Load())
}

// TestDeferredNotIntoAPausedPhase: an advance into a phase this sagad
// knows is paused is written, not deferred, so status tells the truth for
// as long as the pause lasts: the capsule queued at a paused EXECUTION
// stands at EXECUTION, in progress. Resumed, it completes once; and the
// view follows the resume, so the next capsule defers again.
func TestDeferredNotIntoAPausedPhase(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	a := f.admin(t)
	require.NoError(t, a.PausePhase(ctx, capsule.Execution))
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return pipeline.PhasePaused(f.pipe, capsule.Execution)
	}, "the pause was never seen")
	raw := capsuletest.New().Sealed(t)
	id := idOf(t, raw)
	f.publish(t, raw)
	queued(t, f, capsule.Execution, 1)
	s, err := f.client.Status(ctx, id)
	require.NoError(t, err)
	require.Equal(t, capsule.InProgress, s.State)
	require.Equal(t, int(capsule.Execution), s.Phase, "the capsule shows the paused phase it waits at")
	require.Len(t, s.History, 4)

	require.NoError(t, a.ResumePhase(ctx, capsule.Execution))
	requireSevenPhases(t, f.wait(t, id))
	require.Equal(t, int64(1), f.executed.Load())
	requireOutcomes(t, f, 1)
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return !pipeline.PhasePaused(f.pipe, capsule.Execution)
	}, "the resume was never seen")
}

// TestDeferredAnchorHaltsAsWritten holds REALITY_ANCHOR's deferral (it
// forwards undecided; the first phase to write decides it) to the routine
// it replaces (NoDefer: REALITY_ANCHOR decides and writes): a target or a
// context ref that does not resolve halts the same way, at the same phase,
// with the same findings and history, and nothing runs.
func TestDeferredAnchorHaltsAsWritten(t *testing.T) {
	t.Parallel()
	docs := map[string]func() capsuletest.Doc{
		"kv target missing":   func() capsuletest.Doc { return capsuletest.New().Set("target", "kv:NOPE/key") },
		"context ref missing": func() capsuletest.Doc { return capsuletest.New().Set("context_refs", []any{"file:nope.txt"}) },
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			run := func(noDefer bool) client.Status {
				f := setupWith(t, func(c *pipeline.Config) { c.NoDefer = noDefer })
				raw := doc().Sealed(t)
				f.publish(t, raw)
				s := f.wait(t, idOf(t, raw))
				require.Zero(t, f.executed.Load())
				return s
			}
			written, deferred := run(true), run(false)
			require.Equal(t, capsule.Halted, deferred.State)
			require.Equal(t, written.HaltReason, deferred.HaltReason)
			require.Equal(t, written.Phase, deferred.Phase)
			require.Equal(t, int(capsule.RealityAnchor), deferred.Phase)
			require.Equal(t, written.Findings, deferred.Findings)
			require.Len(t, deferred.History, len(written.History))
			for i := range written.History {
				w, d := written.History[i], deferred.History[i]
				require.Equal(t, []any{w.Phase, w.Cycle, w.Outcome, w.Detail}, []any{d.Phase, d.Cycle, d.Outcome, d.Detail})
			}
		})
	}
}
