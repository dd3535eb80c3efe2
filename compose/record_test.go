package compose_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/store"
)

// outcomes are the composition outcome messages of id on SAGA_OUTCOMES.
func (f *fixture) outcomes(t *testing.T, id string) []compose.Outcome {
	t.Helper()
	ctx := context.Background()
	s, err := f.js.Stream(ctx, store.OutcomesStream)
	require.NoError(t, err)
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{compose.OutcomePrefix + id}})
	require.NoError(t, err)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	var out []compose.Outcome
	for range info.NumPending {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		var o compose.Outcome
		require.NoError(t, json.Unmarshal(m.Data(), &o))
		out = append(out, o)
	}
	return out
}

// events are the kinds of the composition events of producer's id.
func (f *fixture) events(t *testing.T, id, producer string) []capsule.EventKind {
	t.Helper()
	ctx := context.Background()
	s, err := f.js.Stream(ctx, store.EventsStream)
	require.NoError(t, err)
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{store.EventSubject(compose.EventKey(id, producer))}})
	require.NoError(t, err)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	seen := map[string]bool{}
	var out []capsule.EventKind
	for range info.NumPending {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		evs, err := capsule.DecodeEvents(m.Data())
		require.NoError(t, err)
		for _, ev := range evs {
			if !seen[ev.ID] {
				seen[ev.ID] = true
				out = append(out, ev.Kind)
			}
		}
	}
	return out
}

// ended waits for the run's record to say its outcome was sent.
func (f *fixture) runEnded(t *testing.T, id, producer string, run int) *compose.Record {
	t.Helper()
	var rec *compose.Record
	natstest.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool {
		r, err := compose.GetRun(context.Background(), f.st, id, producer, run)
		require.NoError(t, err)
		rec = r
		return r.OutcomeSent
	}, "composition %s run %d never ended", id, run)
	return rec
}

// TestCompositionRecord: a fan-out/fan-in run's record says completed with
// every step's end and final artifact, its events are started, one
// step_ended per step and ended, and exactly one outcome went out, even
// when every step's end is delivered again, and when the outcome is sent
// again after a crash before its sending was recorded.
func TestCompositionRecord(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	r, err := f.composeAs(t, "alice", f.compositionDoc(t, "rec", fanOutFanIn, nil))
	require.NoError(t, err)
	rec := f.runEnded(t, "rec", "alice", 1)
	m := compose.Manifest(rec)
	require.Equal(t, compose.StateCompleted, m.State)
	require.Equal(t, compose.Summary{Total: 5, Passed: 5, ExitCode: 0}, m.Summary)
	for i, s := range m.Steps {
		require.Equal(t, fanOutFanIn[i].name, s.Name)
		require.Equal(t, r.Steps[i].CapsuleID, s.CapsuleID)
		require.Equal(t, string(capsule.Completed), s.State)
		require.NotNil(t, s.ExitCode)
		require.Zero(t, *s.ExitCode)
		cp, _, err := f.st.Checkpoints.Get(ctx, s.CapsuleID)
		require.NoError(t, err)
		require.Equal(t, cp.State.ArtifactRefs[len(cp.State.ArtifactRefs)-1], s.Artifact)
	}

	// Redelivery of every step's end, and a crash between the outcome and
	// its record: still one outcome.
	_, err = compose.UpdateRecord(ctx, f.st, "rec", "alice", 1, func(r *compose.Record) error { r.OutcomeSent = false; return nil })
	require.NoError(t, err)
	for _, s := range r.Steps {
		raw, _, err := f.st.Raw(ctx, s.CapsuleID)
		require.NoError(t, err)
		require.NoError(t, f.runner.StepEnded(ctx, raw, s.CapsuleID))
	}
	again, err := compose.GetRun(ctx, f.st, "rec", "alice", 1)
	require.NoError(t, err)
	require.True(t, again.OutcomeSent)
	require.Equal(t, rec.Ended, again.Ended)

	outs := f.outcomes(t, "rec")
	require.Len(t, outs, 1)
	require.Equal(t, m, outs[0])
	evs := f.events(t, "rec", "alice")
	require.Len(t, evs, 12, "%v", evs)
	require.Equal(t, compose.EventStarted, evs[0])
	require.Equal(t, compose.EventEnded, evs[11])
	counts := map[capsule.EventKind]int{}
	for _, k := range evs[1:11] {
		counts[k]++
	}
	require.Equal(t, map[capsule.EventKind]int{compose.EventStepStarted: 5, compose.EventStepEnded: 5}, counts)
}

// TestCompositionPartial: a translation that fails halts, so does the
// merge that needs it; the others complete: partial, exit code 12.
func TestCompositionPartial(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.rec.mu.Lock()
	f.rec.fail["de"] = true
	f.rec.mu.Unlock()
	_, err := f.composeAs(t, "alice", f.compositionDoc(t, "part", fanOutFanIn, nil))
	require.NoError(t, err)
	m := compose.Manifest(f.runEnded(t, "part", "alice", 1))
	require.Equal(t, compose.StatePartial, m.State)
	require.Equal(t, compose.Summary{Total: 5, Passed: 3, Failed: 2, ExitCode: 12}, m.Summary)
	byName := map[string]compose.StepOutcome{}
	for _, s := range m.Steps {
		byName[s.Name] = s
	}
	require.Equal(t, string(capsule.Halted), byName["de"].State)
	require.Equal(t, string(capsule.Halted), byName["merge"].State)
	require.Contains(t, byName["merge"].HaltReason, "dependency_failed")
	require.Equal(t, 1, *byName["merge"].ExitCode)
	require.Len(t, f.outcomes(t, "part"), 1)

	// Fixed, the run is replayed: de and the merge run again, the others
	// are kept; the round ends completed with an outcome of its own.
	f.rec.mu.Lock()
	f.rec.fail["de"] = false
	f.rec.mu.Unlock()
	ctx := context.Background()
	rec, err := compose.GetRun(ctx, f.st, "part", "alice", 1)
	require.NoError(t, err)
	replay := func(ctx context.Context, id, reason, by string) error {
		_, err := f.admin.Replay(ctx, id, admin.ReplayOptions{By: by, Reason: reason, Dependents: true})
		return err
	}
	_, err = compose.Replay(ctx, f.st, replay, rec, "ops", "translator back")
	require.NoError(t, err)
	natstest.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool {
		r, err := compose.GetRun(ctx, f.st, "part", "alice", 1)
		require.NoError(t, err)
		rec = r
		return r.OutcomeSent
	}, "the replay round ends")
	m = compose.Manifest(rec)
	require.Equal(t, 1, m.Round)
	require.Equal(t, compose.StateCompleted, m.State)
	require.Equal(t, compose.Summary{Total: 5, Passed: 5, ExitCode: 0}, m.Summary)
	outs := f.outcomes(t, "part")
	require.Len(t, outs, 2)
	require.Equal(t, compose.StateCompleted, outs[1].State)
	_, err = compose.Replay(ctx, f.st, replay, rec, "ops", "again")
	require.ErrorIs(t, err, compose.ErrEnded, "nothing to replay")
}

// TestRecordSize256: a 256-step run's record with every step ended stays
// far below the KV value limit (1 MiB): docs/COMPOSITIONS.md gives the size.
func TestRecordSize256(t *testing.T) {
	t.Parallel()
	ids, err := compose.NewStepIDs(compose.MaxSteps)
	require.NoError(t, err)
	now := time.Now().UTC()
	rec := compose.Record{CompositionID: "a-composition-id-of-forty-characters-xyz", Producer: "producer-name", Digest: strings.Repeat("d", 64),
		Steps: ids, CreatedAt: now, Run: 7, State: compose.StatePartial, OutcomeSent: true, EndedAt: &now}
	for i, id := range ids {
		rec.StepDigests = append(rec.StepDigests, strings.Repeat("e", 64))
		rec.Names = append(rec.Names, fmt.Sprintf("translate-into-%03d", i))
		var needs []int
		if i > 0 {
			needs = []int{0, i - 1} // a fan-out of the first, and a chain
		}
		rec.Needs = append(rec.Needs, needs)
		rec.Ended = append(rec.Ended, compose.StepEnd{State: string(capsule.Completed), Artifact: "artifact:" + id + "/cycle-3",
			Tokens: 123456, Dollars: 12.3456})
	}
	b, err := json.Marshal(rec)
	require.NoError(t, err)
	t.Logf("a 256-step record: %d bytes", len(b))
	require.Less(t, len(b), 128<<10)
	_, err = compose.DecodeRecord(b)
	require.NoError(t, err)
}

// TestCompositionRunnerRestart: the steps end while no runner runs (a
// crash); the next runner, on the same durable consumer, records every end
// and sends the one outcome.
func TestCompositionRunnerRestart(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	f.runner.Stop()
	r, err := f.composeAs(t, "alice", f.compositionDoc(t, "crash", fanOutFanIn, nil))
	require.NoError(t, err)
	for _, s := range r.Steps {
		require.Equal(t, capsule.Completed, f.ended(t, s.CapsuleID).State.Status)
	}
	rec, err := compose.GetRun(ctx, f.st, "crash", "alice", 1)
	require.NoError(t, err)
	require.Empty(t, rec.Ended, "no runner recorded anything")

	runner, err := compose.StartRunner(ctx, f.st, compose.RunnerConfig{})
	require.NoError(t, err)
	t.Cleanup(runner.Stop)
	rec = f.runEnded(t, "crash", "alice", 1)
	require.Equal(t, compose.StateCompleted, rec.State)
	require.Len(t, f.outcomes(t, "crash"), 1)
}
