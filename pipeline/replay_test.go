package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/schemas"
)

// outcome is one message of the outcome stream.
type outcome struct {
	state capsule.State
	msgID string
}

// outcomesOf lists the outcomes of the capsule with key, oldest first.
func outcomesOf(t *testing.T, f *fixture, key string) []outcome {
	t.Helper()
	ctx := context.Background()
	str, err := f.js.Stream(ctx, pipeline.OutcomesStream)
	require.NoError(t, err)
	info, err := str.Info(ctx)
	require.NoError(t, err)
	var out []outcome
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := str.GetMsg(ctx, seq)
		require.NoError(t, err)
		if m.Header.Get(pipeline.HeaderKey) == key {
			out = append(out, outcome{capsule.State(m.Header.Get(pipeline.HeaderState)), m.Header.Get(jetstream.MsgIDHeader)})
		}
	}
	return out
}

// intakeLastSeq is the intake stream's last sequence: it grows by one per
// message stored (a de-duplicated publish stores none).
func intakeLastSeq(t *testing.T, f *fixture) uint64 {
	t.Helper()
	str, err := f.js.Stream(context.Background(), pipeline.IntakeStream)
	require.NoError(t, err)
	info, err := str.Info(context.Background())
	require.NoError(t, err)
	return info.State.LastSeq
}

// keptBytes is the last entry of the capsule's bytes in SAGA_CAPSULES.
func keptBytes(t *testing.T, f *fixture, key string) *jetstream.RawStreamMsg {
	t.Helper()
	str, err := f.js.Stream(context.Background(), "KV_"+pipeline.CapsulesBucket)
	require.NoError(t, err)
	m, err := str.GetLastMsgForSubject(context.Background(), "$KV."+pipeline.CapsulesBucket+"."+key)
	require.NoError(t, err)
	return m
}

func replayedEvents(t *testing.T, f *fixture, key string) []capsule.Event {
	t.Helper()
	var out []capsule.Event
	for _, ev := range history(t, f, key) {
		if ev.Kind == capsule.EventReplayed {
			out = append(out, ev)
		}
	}
	return out
}

// haltedForMissingFile publishes a capsule whose context ref is a file the
// workspace lacks (kind "slow": its executor waits for f.gate) and waits
// for it to halt; it returns the capsule and the file's path.
func haltedForMissingFile(t *testing.T, f *fixture) (capsuletest.Doc, string) {
	t.Helper()
	name := "missing-" + capsuletest.NewID() + ".txt"
	doc := f.own(t, capsuletest.New().Set("context_refs", []any{"file:" + name}).Set("task.kind", "slow"))
	f.publish(t, doc.Sealed(t))
	s := f.waitState(t, doc.ID(), capsule.Halted)
	require.Equal(t, "context_ref_missing:file:"+name, s.HaltReason)
	require.Equal(t, []outcome{{capsule.Halted, doc.ID() + ".outcome." + strconv.FormatUint(intakeSeqOf(t, f, doc.ID()), 10)}},
		eventuallyOutcomes(t, f, doc.ID(), 1))
	return doc, filepath.Join(f.workspace, name)
}

func intakeSeqOf(t *testing.T, f *fixture, key string) uint64 {
	t.Helper()
	cp, err := f.client.Checkpoint(context.Background(), key)
	require.NoError(t, err)
	return cp.IntakeSeq
}

// eventuallyOutcomes waits for n outcomes of key, then requires exactly n.
func eventuallyOutcomes(t *testing.T, f *fixture, key string, n int) []outcome {
	t.Helper()
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool { return len(outcomesOf(t, f, key)) >= n },
		"fewer than %d outcomes of %s", n, key)
	got := outcomesOf(t, f, key)
	require.Len(t, got, n)
	return got
}

// TestReplayAfterTheCauseIsFixed: a capsule halts for a missing file; the
// operator creates it and replays the capsule, which runs again from its
// original bytes as a new run and completes. The old run's end is in the
// replayed event, both outcomes are on the outcome stream (the second well
// inside the de-duplication window of the first), the executor ran once, and
// the new run's bytes carry neither the old run's outcome mark nor its time
// to live.
func TestReplayAfterTheCauseIsFixed(t *testing.T) {
	t.Parallel()
	f := setupWith(t, func(c *pipeline.Config) { c.Retention = time.Hour })
	ctx := context.Background()
	doc, missing := haltedForMissingFile(t, f)
	old, err := f.client.Checkpoint(ctx, doc.ID())
	require.NoError(t, err)
	require.NotEmpty(t, keptBytes(t, f, doc.ID()).Header.Get(jetstream.MsgTTLHeader), "the ended run's bytes expire")
	require.Zero(t, f.executed.Load())

	require.NoError(t, os.WriteFile(missing, []byte("here now"), 0o644))
	s, err := f.admin(t).Replay(ctx, doc.ID(), "the file exists now", "carol")
	require.NoError(t, err)
	require.Equal(t, doc.ID(), s.Key)
	require.Equal(t, doc.ID(), s.CapsuleID)
	require.Equal(t, capsule.InProgress, s.State)
	require.Equal(t, int(capsule.Reception), s.Phase)
	require.Equal(t, old.TraceID, s.TraceID)

	// The new run waits in EXECUTION: its bytes are its own.
	eventuallyExecuted(t, f, 1)
	kept := keptBytes(t, f, doc.ID())
	require.Empty(t, kept.Header.Get(pipeline.HeaderOutcomeSent), "the old run's outcome mark")
	require.Empty(t, kept.Header.Get(jetstream.MsgTTLHeader), "the old run's time to live")
	require.Equal(t, doc.Sealed(t), kept.Data)
	f.gate <- struct{}{}

	s = f.waitState(t, doc.ID(), capsule.Completed)
	require.Equal(t, []string{
		"RECEPTION/passed", "REALITY_ANCHOR/passed", "PLANNING/passed", "AUTOMATED_GATES/passed",
		"EXECUTION/passed", "REVIEW/passed", "HANDOFF/completed",
	}, outcomes(s.History), "the new run's history")
	require.Equal(t, old.TraceID, s.TraceID, "the new run keeps the trace")
	cp, err := f.client.Checkpoint(ctx, doc.ID())
	require.NoError(t, err)
	require.Greater(t, cp.IntakeSeq, old.IntakeSeq)
	require.NoError(t, schemas.ValidateValue(schemas.Checkpoint, cp))
	require.Equal(t, int64(1), f.executed.Load())

	require.Equal(t, []outcome{
		{capsule.Halted, doc.ID() + ".outcome." + strconv.FormatUint(old.IntakeSeq, 10)},
		{capsule.Completed, doc.ID() + ".outcome." + strconv.FormatUint(cp.IntakeSeq, 10)},
	}, eventuallyOutcomes(t, f, doc.ID(), 2))
	requireOutcomes(t, f, 2)

	replays := replayedEvents(t, f, doc.ID())
	require.Len(t, replays, 1)
	ev := replays[0]
	require.Equal(t, "carol", ev.By)
	require.Equal(t, capsule.RealityAnchor, ev.Phase)
	require.Equal(t, "ended halted at 1 REALITY_ANCHOR, cycle 0 (context_ref_missing:file:"+filepath.Base(missing)+"); replayed: the file exists now", ev.Detail)
	kinds := countEvents(t, f, doc.ID())
	require.Equal(t, 1, kinds[capsule.EventReceived], "the old run's transitions went with its checkpoint")
	require.Equal(t, 1, kinds[capsule.EventCompleted])
}

// TestReplayRefused: a capsule in progress, paused, waiting for an operator
// or completed is not replayed; nothing changes and nothing is published.
func TestReplayRefused(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	a := f.admin(t)
	done := f.own(t, capsuletest.New())
	f.publish(t, done.Sealed(t))
	f.waitState(t, done.ID(), capsule.Completed)
	gated := f.own(t, capsuletest.New().Set("review.operator_gate", true))
	f.publish(t, gated.Sealed(t))
	f.waitState(t, gated.ID(), capsule.WaitingForOperator)
	running := f.own(t, capsuletest.New().Set("task.kind", "slow"))
	f.publish(t, running.Sealed(t))
	eventuallyExecuted(t, f, 1)
	requireOutcomes(t, f, 1)

	refused := func(id string, want capsule.State) {
		t.Helper()
		before, err := f.client.Checkpoint(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, before.State.Status)
		seq := intakeLastSeq(t, f)
		_, err = a.Replay(ctx, id, "try", "carol")
		require.ErrorIs(t, err, pipeline.ErrRefused, "%s", want)
		var se *pipeline.StateError
		require.ErrorAs(t, err, &se)
		require.Equal(t, want, se.State)
		after, err := f.client.Checkpoint(ctx, id)
		require.NoError(t, err)
		// A running executor's heartbeat renews its claim meanwhile.
		before.State.Execution, after.State.Execution = nil, nil
		require.Equal(t, before, after, "%s: unchanged", want)
		require.Equal(t, seq, intakeLastSeq(t, f), "%s: nothing published", want)
		require.Empty(t, replayedEvents(t, f, id), "%s: no replayed event", want)
	}
	refused(done.ID(), capsule.Completed)
	refused(gated.ID(), capsule.WaitingForOperator)
	refused(running.ID(), capsule.InProgress)
	_, err := a.Pause(ctx, running.ID(), "hold", "carol")
	require.NoError(t, err)
	refused(running.ID(), capsule.Paused)
	requireOutcomes(t, f, 1)

	_, err = a.Replay(ctx, "no-such-capsule", "", "carol")
	require.ErrorIs(t, err, pipeline.ErrNotFound)
	f.gate <- struct{}{}
}

// TestReplayWithoutCheckpoint: the checkpoint of an ended capsule is gone
// while its bytes are kept (a replay died after removing it, or the
// retention removed it first); Replay still starts the run from the bytes.
func TestReplayWithoutCheckpoint(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	doc, missing := haltedForMissingFile(t, f)
	require.NoError(t, os.WriteFile(missing, []byte("here now"), 0o644))
	kv, err := f.js.KeyValue(ctx, pipeline.CheckpointsBucket)
	require.NoError(t, err)
	require.NoError(t, kv.Delete(ctx, doc.ID()))
	_, err = f.client.Status(ctx, doc.ID())
	require.ErrorIs(t, err, pipeline.ErrNotFound)

	seq := intakeLastSeq(t, f)
	s, err := f.admin(t).Replay(ctx, doc.ID(), "after a crash", "carol")
	require.NoError(t, err)
	require.Equal(t, doc.ID(), s.Key)
	require.Equal(t, seq+1, intakeLastSeq(t, f))
	f.gate <- struct{}{}
	require.Equal(t, capsule.Completed, f.waitState(t, doc.ID(), capsule.Completed).State)
	require.Equal(t, int64(1), f.executed.Load())
	got := eventuallyOutcomes(t, f, doc.ID(), 2)
	require.Equal(t, capsule.Completed, got[1].state)
	replays := replayedEvents(t, f, doc.ID())
	require.Len(t, replays, 1)
	require.Contains(t, replays[0].Detail, "checkpoint is gone")

	// Neither checkpoint nor bytes: not found.
	_, err = f.admin(t).Replay(ctx, capsuletest.NewID(), "", "carol")
	require.ErrorIs(t, err, pipeline.ErrNotFound)
}

// TestReplayTwiceRunsOnce: two replays, one after the other or at once,
// send the bytes once and start one new run.
func TestReplayTwiceRunsOnce(t *testing.T) {
	t.Parallel()
	for _, concurrent := range []bool{false, true} {
		name := "sequential"
		if concurrent {
			name = "concurrent"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			ctx := context.Background()
			doc, missing := haltedForMissingFile(t, f)
			require.NoError(t, os.WriteFile(missing, []byte("here now"), 0o644))
			seq := intakeLastSeq(t, f)
			const n = 4
			errs := make([]error, n)
			if concurrent {
				var wg sync.WaitGroup
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						_, errs[i] = f.admin(t).Replay(ctx, doc.ID(), "again", "carol")
					}()
				}
				wg.Wait()
			} else {
				a := f.admin(t)
				for i := range n {
					_, errs[i] = a.Replay(ctx, doc.ID(), "again", "carol")
				}
			}
			ok := 0
			for _, err := range errs {
				// A replay that comes after the new run was received is
				// refused by its state.
				if err != nil {
					require.ErrorIs(t, err, pipeline.ErrRefused)
				} else {
					ok++
				}
			}
			require.NotZero(t, ok)
			if !concurrent {
				require.NoError(t, errs[0])
			}
			require.Equal(t, seq+1, intakeLastSeq(t, f), "the bytes were sent once")
			eventuallyExecuted(t, f, 1)
			f.gate <- struct{}{}
			f.waitState(t, doc.ID(), capsule.Completed)
			waitDrained(t, f)
			require.Equal(t, int64(1), f.executed.Load())
			got := eventuallyOutcomes(t, f, doc.ID(), 2)
			require.Equal(t, capsule.Completed, got[1].state)
			requireOutcomes(t, f, 2)
			require.Len(t, replayedEvents(t, f, doc.ID()), 1)
			require.Zero(t, countEvents(t, f, doc.ID())[capsule.EventDuplicateIgnored])

			_, err := f.admin(t).Replay(ctx, doc.ID(), "once more", "carol")
			require.ErrorIs(t, err, pipeline.ErrRefused, "a completed capsule")
		})
	}
}

// TestReplayHaltsAtReceptionAgain: a replayed run that halts at RECEPTION
// (its deadline has passed) records its end over the marker the replay left,
// with the retention as time to live, and emits its own outcome.
func TestReplayHaltsAtReceptionAgain(t *testing.T) {
	t.Parallel()
	f := setupWith(t, func(c *pipeline.Config) { c.Retention = time.Hour })
	ctx := context.Background()
	doc := f.own(t, capsuletest.New().Set("deadline", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)))
	f.publish(t, doc.Sealed(t))
	require.Equal(t, "deadline_in_past", f.waitState(t, doc.ID(), capsule.Halted).HaltReason)
	first := intakeSeqOf(t, f, doc.ID())
	eventuallyOutcomes(t, f, doc.ID(), 1)

	_, err := f.admin(t).Replay(ctx, doc.ID(), "", "carol")
	require.NoError(t, err)
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		cp, err := f.client.Checkpoint(ctx, doc.ID())
		return err == nil && cp.IntakeSeq != first && cp.State.Status == capsule.Halted
	}, "the replayed run never ended")
	got := eventuallyOutcomes(t, f, doc.ID(), 2)
	require.Equal(t, []capsule.State{capsule.Halted, capsule.Halted}, []capsule.State{got[0].state, got[1].state})
	require.NotEqual(t, got[0].msgID, got[1].msgID)
	str, err := f.js.Stream(ctx, "KV_"+pipeline.CheckpointsBucket)
	require.NoError(t, err)
	m, err := str.GetLastMsgForSubject(ctx, "$KV."+pipeline.CheckpointsBucket+"."+doc.ID())
	require.NoError(t, err)
	require.Equal(t, "1h0m0s", m.Header.Get(jetstream.MsgTTLHeader), "the ended checkpoint expires")
}

// TestReplayBadInput: bytes that are no capsule halt under x-<seq>; replayed,
// they are received again under a new x- key (and halt again), the old
// record makes way, and replaying the old key again is refused.
func TestReplayBadInput(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	seq, err := f.client.Publish(ctx, []byte("this is not json"), "")
	require.NoError(t, err)
	oldKey := "x-" + strconv.FormatUint(seq, 10)
	require.Equal(t, "not_json", f.waitState(t, oldKey, capsule.Halted).HaltReason)
	eventuallyOutcomes(t, f, oldKey, 1)

	a := f.admin(t)
	s, err := a.Replay(ctx, oldKey, "new parser", "carol")
	require.NoError(t, err)
	newSeq := intakeLastSeq(t, f)
	newKey := "x-" + strconv.FormatUint(newSeq, 10)
	require.Equal(t, newKey, s.Key)
	require.Equal(t, "not_json", f.waitState(t, newKey, capsule.Halted).HaltReason)
	_, err = f.client.Status(ctx, oldKey)
	require.ErrorIs(t, err, pipeline.ErrNotFound, "the old record made way")
	eventuallyOutcomes(t, f, newKey, 1)
	requireOutcomes(t, f, 2)
	replays := replayedEvents(t, f, oldKey)
	require.Len(t, replays, 1)
	require.True(t, strings.HasSuffix(replays[0].Detail, "; new run: intake message "+strconv.FormatUint(newSeq, 10)), replays[0].Detail)

	_, err = a.Replay(ctx, oldKey, "again", "carol")
	require.ErrorIs(t, err, pipeline.ErrRefused, "replayed already")
	require.Contains(t, err.Error(), newKey)
	require.Equal(t, newSeq, intakeLastSeq(t, f), "nothing published")
	requireOutcomes(t, f, 2)
	require.False(t, errors.Is(err, pipeline.ErrNotFound))
}

// TestReplayReceptionDiedBeforeRenewingTheBytes: the new run's RECEPTION
// created its checkpoint and died before renewing the kept bytes, which
// still carry the old run's outcome mark and time to live; the intake
// message's redelivery renews them, and the run goes on.
func TestReplayReceptionDiedBeforeRenewingTheBytes(t *testing.T) {
	t.Parallel()
	f := setupWith(t, func(c *pipeline.Config) { c.Retention = time.Hour })
	ctx := context.Background()
	doc, missing := haltedForMissingFile(t, f)
	old, err := f.client.Checkpoint(ctx, doc.ID())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(missing, []byte("here now"), 0o644))
	a := f.admin(t)
	require.NoError(t, a.PausePhase(ctx, capsule.Reception))
	_, err = a.Replay(ctx, doc.ID(), "", "carol")
	require.NoError(t, err)

	// What the dying RECEPTION wrote: the new run's first checkpoint.
	now := time.Now().UTC()
	cp := *old
	cp.IntakeSeq = intakeLastSeq(t, f)
	cp.CreatedAt, cp.UpdatedAt = now, now
	cp.History = []capsule.Transition{{Phase: capsule.Reception, PhaseName: capsule.Reception.String(), Outcome: capsule.OutcomePassed, At: now}}
	cp.State = capsule.CheckpointState{
		Phase: capsule.RealityAnchor, PhaseName: capsule.RealityAnchor.String(), Progress: capsule.Reception.Progress(),
		Status: capsule.InProgress, LocksHeld: []string{}, ArtifactRefs: []string{},
	}
	b, err := json.Marshal(&cp)
	require.NoError(t, err)
	kv, err := f.js.KeyValue(ctx, pipeline.CheckpointsBucket)
	require.NoError(t, err)
	_, err = kv.Create(ctx, doc.ID(), b)
	require.NoError(t, err)
	stale := keptBytes(t, f, doc.ID())
	require.Equal(t, doc.ID()+".outcome."+strconv.FormatUint(old.IntakeSeq, 10), stale.Header.Get(pipeline.HeaderOutcomeSent))
	require.NotEmpty(t, stale.Header.Get(jetstream.MsgTTLHeader))

	require.NoError(t, a.ResumePhase(ctx, capsule.Reception))
	eventuallyExecuted(t, f, 1)
	kept := keptBytes(t, f, doc.ID())
	require.Empty(t, kept.Header.Get(pipeline.HeaderOutcomeSent), "the old run's outcome mark")
	require.Empty(t, kept.Header.Get(jetstream.MsgTTLHeader), "the old run's time to live")
	f.gate <- struct{}{}
	f.waitState(t, doc.ID(), capsule.Completed)
	got := eventuallyOutcomes(t, f, doc.ID(), 2)
	require.Equal(t, capsule.Completed, got[1].state)
	require.Equal(t, doc.ID()+".outcome."+strconv.FormatUint(cp.IntakeSeq, 10), keptBytes(t, f, doc.ID()).Header.Get(pipeline.HeaderOutcomeSent))
	require.Zero(t, countEvents(t, f, doc.ID())[capsule.EventDuplicateIgnored])
}

// TestReplaySendsTheEndedRunsOutcome: a capsule whose end is recorded but
// whose outcome never went out (sagad died in between) gets it before its
// checkpoint makes way for the new run: the replay loses no outcome.
func TestReplaySendsTheEndedRunsOutcome(t *testing.T) {
	t.Parallel()
	f := setupWith(t, func(c *pipeline.Config) { c.DuplicateWindow = time.Second })
	ctx := context.Background()
	doc, missing := haltedForMissingFile(t, f)
	require.NoError(t, os.WriteFile(missing, []byte("here now"), 0o644))
	// Undo the outcome: gone from the stream, unmarked on the bytes.
	str, err := f.js.Stream(ctx, pipeline.OutcomesStream)
	require.NoError(t, err)
	info, err := str.Info(ctx)
	require.NoError(t, err)
	require.NoError(t, str.DeleteMsg(ctx, info.State.LastSeq))
	kv, err := f.js.KeyValue(ctx, pipeline.CapsulesBucket)
	require.NoError(t, err)
	_, err = kv.Put(ctx, doc.ID(), doc.Sealed(t))
	require.NoError(t, err)
	require.Empty(t, outcomesOf(t, f, doc.ID()))
	// Not a synchronisation: the point is to be past a time window, so
	// that the outcome sent again is stored again.
	time.Sleep(1200 * time.Millisecond)

	_, err = f.admin(t).Replay(ctx, doc.ID(), "", "carol")
	require.NoError(t, err)
	f.gate <- struct{}{}
	f.waitState(t, doc.ID(), capsule.Completed)
	got := eventuallyOutcomes(t, f, doc.ID(), 2)
	require.Equal(t, []capsule.State{capsule.Halted, capsule.Completed}, []capsule.State{got[0].state, got[1].state})
}
