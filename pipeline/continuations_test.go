package pipeline_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/sagatest"
	"github.com/sagad/sagad/store"
)

// completion is an execute completion with body's members and the
// completion token the "accepting" executor was last given.
func (f *fixture) completion(t *testing.T, body string) []byte {
	t.Helper()
	return f.bundle.Completion(t, body)
}

func (f *fixture) admin(t *testing.T) *admin.Admin {
	t.Helper()
	return f.bundle.Admin(t)
}

// waitState polls until the capsule is in state s.
func (f *fixture) waitState(t *testing.T, id string, s capsule.State) client.Status {
	t.Helper()
	return f.bundle.WaitState(t, id, s)
}

func eventKinds(t *testing.T, f *fixture, id string) []capsule.EventKind {
	t.Helper()
	return f.bundle.EventKinds(t, id)
}

func requireContinuation(t *testing.T, f *fixture, key string, trigger capsule.Trigger, ph capsule.Phase) {
	t.Helper()
	f.bundle.RequireContinuation(t, key, trigger, ph)
}

func requireNoContinuation(t *testing.T, f *fixture, key string) {
	t.Helper()
	f.bundle.RequireNoContinuation(t, key)
}

// TestBudgetWarning pauses after 75 % of a cap; resume with a raised cap
// finishes without re-running the executor.
func TestBudgetWarning(t *testing.T) {
	t.Parallel()
	f := setup(t)
	a := f.admin(t)
	ctx := context.Background()
	doc := f.own(t, capsuletest.New().Stub(map[string]any{"usage": map[string]any{"tokens": 8000, "dollars": 0.1}}))
	f.publish(t, doc.Sealed(t))
	s := f.waitState(t, doc.ID(), capsule.Paused)
	require.Equal(t, int(capsule.ReviewPhase), s.Phase)
	requireContinuation(t, f, doc.ID(), capsule.TriggerBudgetWarning, capsule.ReviewPhase)
	_, err := a.Resume(ctx, doc.ID(), admin.ResumeOptions{By: "dave", Tokens: 50000})
	require.NoError(t, err)
	s = f.wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State)
	require.Equal(t, int64(1), f.executed.Load())
}

// TestDeadlineApproaching pauses a capsule close to its deadline; resume with
// a later deadline completes it.
func TestDeadlineApproaching(t *testing.T) {
	t.Parallel()
	f := setup(t)
	a := f.admin(t)
	ctx := context.Background()
	doc := f.own(t, capsuletest.New().Set("deadline", time.Now().Add(3*time.Minute).UTC().Format(time.RFC3339)))
	f.publish(t, doc.Sealed(t))
	s := f.waitState(t, doc.ID(), capsule.Paused)
	requireContinuation(t, f, doc.ID(), capsule.TriggerDeadlineApproaching, capsule.Phase(s.Phase))
	later := time.Now().Add(time.Hour)
	_, err := a.Resume(ctx, doc.ID(), admin.ResumeOptions{Deadline: &later})
	require.NoError(t, err)
	require.Equal(t, capsule.Completed, f.wait(t, doc.ID()).State)
}

// TestPausedSurvivesRestart: paused stays paused and waiting stays waiting
// across a sagad restart; a phase paused by an operator stays paused; resumed
// capsules then run once.
func TestPausedSurvivesRestart(t *testing.T) {
	t.Parallel()
	// A short sweep interval: the restarted pipeline's sweeper looks at the
	// parked capsules many times before they are checked.
	f := setupWith(t, func(c *pipeline.Config) { c.SweepInterval = 50 * time.Millisecond })
	a := f.admin(t)
	ctx := context.Background()
	// Through the pipeline's own admin, whose pause view has it at once:
	// the capsule is written at the paused PLANNING, not left at
	// REALITY_ANCHOR with its advance deferred.
	require.NoError(t, f.pipe.Admin().PausePhase(ctx, capsule.Planning))
	paused := f.own(t, capsuletest.New())
	gated := f.own(t, capsuletest.New().Set("review.operator_gate", true))
	f.publish(t, paused.Sealed(t))
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		s, err := f.client.Status(ctx, paused.ID())
		return err == nil && s.Phase == int(capsule.Planning)
	}, "queued")
	_, err := a.Pause(ctx, paused.ID(), "hold over the restart", "alice")
	require.NoError(t, err)
	require.NoError(t, a.ResumePhase(ctx, capsule.Planning))
	f.publish(t, gated.Sealed(t))
	f.waitState(t, gated.ID(), capsule.WaitingForOperator)
	require.NoError(t, a.PausePhase(ctx, capsule.Handoff))
	waitDrained(t, f) // the paused capsule's queued message was delivered and dropped
	require.Equal(t, int64(1), f.executed.Load(), "the gated capsule ran its executor; the paused one never reached EXECUTION")

	// What the restart has to keep.
	pausedBefore, err := f.client.Checkpoint(ctx, paused.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.Paused, pausedBefore.State.Status)
	require.Equal(t, capsule.Planning, pausedBefore.State.Phase)
	require.NotNil(t, pausedBefore.State.Pause)
	require.Equal(t, capsule.TriggerOperatorManual, pausedBefore.State.Pause.Trigger)
	require.Equal(t, "hold over the restart", pausedBefore.State.Pause.Reason)
	require.Equal(t, "alice", pausedBefore.State.Pause.By)
	require.Empty(t, pausedBefore.State.Pause.ResumeToken, "no resume in flight")
	gatedBefore, err := f.client.Checkpoint(ctx, gated.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.WaitingForOperator, gatedBefore.State.Status)
	require.Equal(t, capsule.Handoff, gatedBefore.State.Phase)
	require.NotNil(t, gatedBefore.State.Pause)
	require.Equal(t, capsule.TriggerOperatorGate, gatedBefore.State.Pause.Trigger)
	require.Empty(t, gatedBefore.State.Pause.ResumeToken)
	require.NotNil(t, gatedBefore.State.Result, "the gated capsule's executor result is recorded")
	requireContinuation(t, f, paused.ID(), capsule.TriggerOperatorManual, capsule.Planning)
	contBefore := continuation(t, f, paused.ID())
	pendingBefore := pendingItems(t, a)
	require.Len(t, pendingBefore, 2)
	eventsBefore := map[string][]capsule.Event{paused.ID(): history(t, f, paused.ID()), gated.ID(): history(t, f, gated.ID())}
	handoffPause := phaseConsumer(t, f, capsule.Handoff).Config.PauseUntil
	require.NotNil(t, handoffPause)

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	f.pipe.Stop(stopCtx)
	cancel()
	f.pipe = f.start(t, f.cfg)
	restarted := time.Now()

	// The restarted pipeline runs: a new capsule goes through every phase up
	// to HANDOFF, whose consumer, still paused, keeps it queued.
	probe := f.own(t, capsuletest.New())
	f.publish(t, probe.Sealed(t))
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		s, err := f.client.Status(ctx, probe.ID())
		if err != nil || s.State != capsule.InProgress || s.Phase != int(capsule.Handoff) {
			return false
		}
		info := phaseConsumer(t, f, capsule.Handoff)
		return info.NumPending == 1 && info.NumAckPending == 0
	}, "probe queued at the paused HANDOFF")
	// Not a synchronisation: the restarted sweeper must have had several
	// turns (every 50 ms) at the parked capsules before they are compared.
	if d := 4*f.cfg.SweepInterval - time.Since(restarted); d > 0 {
		time.Sleep(d)
	}
	require.Equal(t, int64(2), f.executed.Load(), "only the probe ran its executor since the restart")
	info := phaseConsumer(t, f, capsule.Handoff)
	require.True(t, info.Paused, "a paused phase stays paused across restart")
	require.NotNil(t, info.Config.PauseUntil)
	require.True(t, handoffPause.Equal(*info.Config.PauseUntil), "the same phase pause: until %s, now %s", handoffPause, info.Config.PauseUntil)
	phasesNow, err := a.Phases(ctx)
	require.NoError(t, err)
	for _, ph := range phasesNow {
		require.Equal(t, ph.Phase == int(capsule.Handoff), ph.Paused, "phase %s paused", ph.PhaseName)
	}

	// Nothing the restarted pipeline did touched the parked capsules: their
	// checkpoints (state, pause trigger, reason, time, no resume token,
	// history), the continuation, the pending list and the events are as
	// they were before the restart.
	pausedAfter, err := f.client.Checkpoint(ctx, paused.ID())
	require.NoError(t, err)
	require.Equal(t, pausedBefore, pausedAfter)
	gatedAfter, err := f.client.Checkpoint(ctx, gated.ID())
	require.NoError(t, err)
	require.Equal(t, gatedBefore, gatedAfter)
	require.Equal(t, contBefore, continuation(t, f, paused.ID()))
	requireContinuation(t, f, gated.ID(), capsule.TriggerOperatorGate, capsule.Handoff) // the sweeper's, for its deadline
	require.Equal(t, pendingBefore, pendingItems(t, a))
	for id, events := range eventsBefore {
		require.Equal(t, events, history(t, f, id), "events of %s", id)
	}

	require.NoError(t, a.ResumePhase(ctx, capsule.Handoff))
	require.Equal(t, capsule.Completed, f.wait(t, probe.ID()).State)
	_, err = a.Resume(ctx, paused.ID(), admin.ResumeOptions{})
	require.NoError(t, err)
	_, err = a.Decide(ctx, gated.ID(), admin.DecisionAccept, "", "carol")
	require.NoError(t, err)
	for _, id := range []string{paused.ID(), gated.ID()} {
		s := f.wait(t, id)
		require.Equal(t, capsule.Completed, s.State, "%s: %s", id, s.HaltReason)
		require.Equal(t, 1, s.CyclesUsed)
		require.Equal(t, []string{"artifact:" + id + "/1"}, s.ArtifactRefs)
		runs := map[string]int{}
		for _, h := range s.History {
			runs[h.PhaseName+"/"+h.Outcome]++
		}
		require.Equal(t, 1, runs["EXECUTION/passed"], "%s: %v", id, outcomes(s.History))
		require.Equal(t, 1, runs["HANDOFF/completed"], "%s: %v", id, outcomes(s.History))
		requireNoContinuation(t, f, id)
	}
	// The gated capsule did not run its executor again: one run each.
	require.Equal(t, int64(3), f.executed.Load())
	requireOutcomes(t, f, 3, "each capsule's outcome emitted once")
	require.Empty(t, pendingItems(t, a))
}

func continuation(t *testing.T, f *fixture, key string) capsule.Continuation {
	t.Helper()
	return f.bundle.Continuation(t, key)
}

// pendingItems is Admin.Pending without the ages, which grow by themselves.
func pendingItems(t *testing.T, a *admin.Admin) []admin.PendingItem {
	t.Helper()
	return sagatest.PendingItems(t, a)
}

func history(t *testing.T, f *fixture, id string) []capsule.Event {
	t.Helper()
	return f.bundle.History(t, id)
}

// phaseConsumer returns the info of phase ph's consumer.
func phaseConsumer(t *testing.T, f *fixture, ph capsule.Phase) *jetstream.ConsumerInfo {
	t.Helper()
	return f.bundle.PhaseConsumer(t, ph)
}

// TestResumeFinishedByPhaseMessage: a resume that died after sending its
// message (state still paused, token set) is finished by the phase itself.
func TestResumeFinishedByPhaseMessage(t *testing.T) {
	t.Parallel()
	f := setup(t)
	a := f.admin(t)
	ctx := context.Background()
	require.NoError(t, a.PausePhase(ctx, capsule.Planning))
	// Another admin paused it: until the pipeline's view has the pause,
	// REALITY_ANCHOR would defer into PLANNING, and the checkpoint would
	// not show the capsule queued there.
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return pipeline.PhasePaused(f.pipe, capsule.Planning)
	}, "the pause was never seen")
	doc := f.own(t, capsuletest.New())
	raw := doc.Sealed(t)
	f.publish(t, raw)
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		s, err := f.client.Status(ctx, doc.ID())
		return err == nil && s.Phase == int(capsule.Planning)
	}, "queued")
	_, err := a.Pause(ctx, doc.ID(), "", "alice")
	require.NoError(t, err)
	require.NoError(t, a.ResumePhase(ctx, capsule.Planning))
	waitDrained(t, f)

	// Simulate the first half of a resume: token recorded, message sent.
	kv, err := f.js.KeyValue(ctx, store.CheckpointsBucket)
	require.NoError(t, err)
	e, err := kv.Get(ctx, doc.ID())
	require.NoError(t, err)
	var cp capsule.Checkpoint
	require.NoError(t, json.Unmarshal(e.Value(), &cp))
	cp.State.Pause.ResumeToken = "tok1"
	b, err := json.Marshal(cp)
	require.NoError(t, err)
	_, err = kv.Update(ctx, doc.ID(), b, e.Revision())
	require.NoError(t, err)
	m := nats.NewMsg(store.PhaseSubject(capsule.Planning))
	m.Data = raw
	m.Header.Set(store.HeaderKey, doc.ID())
	m.Header.Set(store.HeaderCycle, "0")
	m.Header.Set(store.HeaderResumeToken, "tok1")
	_, err = f.js.PublishMsg(ctx, m)
	require.NoError(t, err)
	f.waitState(t, doc.ID(), capsule.Completed)
}
