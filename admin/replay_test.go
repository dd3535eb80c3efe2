package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/sagatest"
	"github.com/sagad/sagad/schemas"
	"github.com/sagad/sagad/store"
)

// flaky fails while down (a worker outage) and is the stub otherwise; it
// records every call's idempotency key.
type flaky struct {
	down *atomic.Bool
	mu   *sync.Mutex
	keys *[]string
}

func (f flaky) Execute(ctx context.Context, req executors.Request) (executors.Result, error) {
	f.mu.Lock()
	*f.keys = append(*f.keys, req.IdempotencyKey)
	f.mu.Unlock()
	if f.down.Load() {
		return executors.Result{}, &executors.FailedError{Detail: "worker down", Usage: capsule.Usage{Tokens: 7, Dollars: 0.01}}
	}
	return executors.Stub{}.Execute(ctx, req)
}

func (f flaky) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), *f.keys...)
}

// setupReplay is a pipeline with the "flaky" executor, down at first.
func setupReplay(t *testing.T, change func(*pipeline.Config)) (*sagatest.Bundle, flaky) {
	t.Helper()
	fl := flaky{down: new(atomic.Bool), mu: new(sync.Mutex), keys: new([]string)}
	fl.down.Store(true)
	f := sagatest.Run(t, func(c *pipeline.Config) {
		c.Executors.RegisterExecutor("flaky", fl)
		c.SweepInterval = 50 * time.Millisecond
		if change != nil {
			change(c)
		}
	})
	return f, fl
}

// outcomeIDs are the de-duplication ids of every outcome message, in order.
func outcomeIDs(t *testing.T, f *sagatest.Bundle) []string {
	t.Helper()
	ctx := context.Background()
	str, err := f.JS.Stream(ctx, store.OutcomesStream)
	require.NoError(t, err)
	info, err := str.Info(ctx)
	require.NoError(t, err)
	var out []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := str.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		require.NoError(t, err)
		out = append(out, m.Header.Get(jetstream.MsgIDHeader))
	}
	return out
}

func runsOf(h []client.HistoryEntry) []int {
	out := make([]int, len(h))
	for i, e := range h {
		out[i] = e.Run
	}
	return out
}

// TestReplayFromWhereItHalted: a capsule halted by a worker outage runs
// again, once the worker is back, as run 2 from EXECUTION: status shows
// the run, the history keeps both runs, each run emits one outcome (the
// second with its own id), the agent is called under a new idempotency
// key, and the budget used carries over. A later phase is refused, and so
// is a replay of the completed capsule, both changing nothing.
func TestReplayFromWhereItHalted(t *testing.T) {
	t.Parallel()
	f, fl := setupReplay(t, nil)
	ctx := context.Background()
	a := f.Admin(t)
	doc := f.Own(t, capsuletest.New().Set("task.kind", "flaky"))
	f.Publish(t, doc.Sealed(t))
	s := f.Wait(t, doc.ID())
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, "executor_failed:worker down", s.HaltReason)
	require.Equal(t, 1, s.Run)
	f.RequireOutcomes(t, 1)
	spent := s.BudgetUsed

	later := capsule.ReviewPhase
	_, err := a.Replay(ctx, doc.ID(), admin.ReplayOptions{By: "op", From: &later})
	require.ErrorIs(t, err, admin.ErrRefused)
	require.Contains(t, err.Error(), "it ended at EXECUTION (phase 4)")
	unchanged, err := f.Client.Status(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, s, unchanged, "a refused replay changes nothing")

	fl.down.Store(false)
	r, err := a.Replay(ctx, doc.ID(), admin.ReplayOptions{By: "op", Reason: "worker back"})
	require.NoError(t, err)
	require.Equal(t, 2, r.Capsule.Run)
	require.Equal(t, int(capsule.Execution), r.Capsule.Phase)
	require.Equal(t, 2, r.Capsule.CyclesUsed, "cycles number on across runs")
	require.Empty(t, r.Dependents)

	s = f.Wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)
	require.Equal(t, 2, s.Run)
	require.Equal(t, []string{
		"RECEPTION/passed", "REALITY_ANCHOR/passed", "PLANNING/passed", "AUTOMATED_GATES/passed", "EXECUTION/halted",
		"EXECUTION/replayed", "EXECUTION/passed", "REVIEW/passed", "HANDOFF/completed",
	}, sagatest.Outcomes(s.History))
	require.Equal(t, []int{1, 1, 1, 1, 1, 2, 2, 2, 2}, runsOf(s.History))
	require.Equal(t, []string{doc.ID() + "/1", doc.ID() + "/2"}, fl.calls(), "each run calls the agent under its own idempotency key")
	require.Greater(t, s.BudgetUsed.Tokens, spent.Tokens, "spend accumulates across runs")
	require.GreaterOrEqual(t, s.BudgetUsed.Tokens, spent.Tokens+executors.DefaultStubUsage.Tokens)

	f.RequireOutcomes(t, 2, "one outcome per run")
	require.Equal(t, []string{doc.ID() + ".outcome", doc.ID() + ".run2.outcome"}, outcomeIDs(t, f))
	require.Equal(t, 1, f.CountEvents(t, doc.ID())[capsule.EventReplayed])

	cp, err := f.Client.Checkpoint(ctx, doc.ID())
	require.NoError(t, err)
	require.NoError(t, schemas.ValidateValue(schemas.Checkpoint, cp))
	require.Equal(t, 2, cp.Run)

	_, err = a.Replay(ctx, doc.ID(), admin.ReplayOptions{By: "op"})
	require.ErrorIs(t, err, admin.ErrRefused, "a completed capsule is not replayed")
	_, err = a.Replay(ctx, "no-such-capsule", admin.ReplayOptions{By: "op"})
	require.ErrorIs(t, err, store.ErrNotFound)
	f.RequireOutcomes(t, 2)
}

// TestReplayFromAnEarlierPhase: --from-phase runs the phases from there
// again; RECEPTION without corrected bytes is refused.
func TestReplayFromAnEarlierPhase(t *testing.T) {
	t.Parallel()
	f, fl := setupReplay(t, nil)
	ctx := context.Background()
	a := f.Admin(t)
	doc := f.Own(t, capsuletest.New().Set("task.kind", "flaky"))
	f.Publish(t, doc.Sealed(t))
	require.Equal(t, capsule.Halted, f.Wait(t, doc.ID()).State)

	rec := capsule.Reception
	_, err := a.Replay(ctx, doc.ID(), admin.ReplayOptions{By: "op", From: &rec})
	require.ErrorIs(t, err, admin.ErrRefused)

	fl.down.Store(false)
	from := capsule.RealityAnchor
	_, err = a.Replay(ctx, doc.ID(), admin.ReplayOptions{By: "op", From: &from})
	require.NoError(t, err)
	s := f.Wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)
	require.Equal(t, []string{
		"RECEPTION/passed", "REALITY_ANCHOR/passed", "PLANNING/passed", "AUTOMATED_GATES/passed", "EXECUTION/halted",
		"EXECUTION/replayed", "REALITY_ANCHOR/passed", "PLANNING/passed", "AUTOMATED_GATES/passed",
		"EXECUTION/passed", "REVIEW/passed", "HANDOFF/completed",
	}, sagatest.Outcomes(s.History))
	f.RequireOutcomes(t, 2)
}

// TestReplayCorrectedCapsule: a capsule halted at REALITY_ANCHOR (its
// target is missing) runs again with a corrected capsule of the same id,
// from RECEPTION; its outcome carries the corrected bytes. A capsule of
// another id, and an invalid one, are refused and change nothing.
func TestReplayCorrectedCapsule(t *testing.T) {
	t.Parallel()
	f, _ := setupReplay(t, nil)
	ctx := context.Background()
	a := f.Admin(t)
	doc := capsuletest.New().Set("target", "file:missing-"+capsuletest.NewID()+".txt")
	f.Publish(t, doc.Sealed(t))
	s := f.Wait(t, doc.ID())
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, int(capsule.RealityAnchor), s.Phase, "halt: %s", s.HaltReason)
	before, err := f.Client.Checkpoint(ctx, doc.ID())
	require.NoError(t, err)

	other := f.Own(t, capsuletest.New())
	_, err = a.Replay(ctx, doc.ID(), admin.ReplayOptions{By: "op", Capsule: other.Sealed(t)})
	require.ErrorIs(t, err, admin.ErrRefused)
	require.Contains(t, err.Error(), "the corrected capsule's id is")
	_, err = a.Replay(ctx, doc.ID(), admin.ReplayOptions{By: "op", Capsule: doc.Unsealed(t)})
	require.ErrorIs(t, err, admin.ErrRefused)
	require.Contains(t, err.Error(), "would halt at RECEPTION")
	// A correction cannot join a chain: only sagad assigns chain steps.
	joined := f.Own(t, doc).Set("chain", map[string]any{"id": "c-1", "step": 0})
	_, err = a.Replay(ctx, doc.ID(), admin.ReplayOptions{By: "op", Capsule: joined.Sealed(t)})
	require.ErrorIs(t, err, admin.ErrRefused)
	require.Contains(t, err.Error(), "only sagad assigns chain steps")
	joined.Delete("chain")
	after, err := f.Client.Checkpoint(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, before, after, "refused replays change nothing")

	fixed := f.Own(t, doc).Sealed(t) // a target that exists, and its lock (Rule 8)
	r, err := a.Replay(ctx, doc.ID(), admin.ReplayOptions{By: "op", Capsule: fixed})
	require.NoError(t, err)
	require.Equal(t, 2, r.Capsule.Run)
	s = f.Wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)
	require.Equal(t, []string{
		"RECEPTION/passed", "REALITY_ANCHOR/halted",
		"REALITY_ANCHOR/replayed", "RECEPTION/passed", "REALITY_ANCHOR/passed", "PLANNING/passed", "AUTOMATED_GATES/passed",
		"EXECUTION/passed", "REVIEW/passed", "HANDOFF/completed",
	}, sagatest.Outcomes(s.History))
	f.RequireOutcomes(t, 2)
	str, err := f.JS.Stream(ctx, store.OutcomesStream)
	require.NoError(t, err)
	m, err := str.GetLastMsgForSubject(ctx, store.OutcomeSubject(capsule.Completed))
	require.NoError(t, err)
	require.Equal(t, string(fixed), string(m.Data), "the run's outcome carries the corrected bytes")
	require.Equal(t, "2", m.Header.Get(store.HeaderRun))
}

// TestReplaysRacing: two replays at once make one run; the other is refused.
func TestReplaysRacing(t *testing.T) {
	t.Parallel()
	f, fl := setupReplay(t, nil)
	ctx := context.Background()
	doc := f.Own(t, capsuletest.New().Set("task.kind", "flaky"))
	f.Publish(t, doc.Sealed(t))
	require.Equal(t, capsule.Halted, f.Wait(t, doc.ID()).State)
	fl.down.Store(false)

	var wg sync.WaitGroup
	errs := make([]error, 2)
	start := make(chan struct{})
	for i := range errs {
		a := f.Admin(t) // each its own admin, as two sagads
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = a.Replay(ctx, doc.ID(), admin.ReplayOptions{By: "op"})
		}()
	}
	close(start)
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		} else {
			require.ErrorIs(t, err, admin.ErrRefused)
		}
	}
	require.Equal(t, 1, ok, "exactly one replay starts a run: %v", errs)
	s := f.Wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State)
	require.Equal(t, 2, s.Run)
	require.Equal(t, 1, f.CountEvents(t, doc.ID())[capsule.EventReplayed])
	f.RequireOutcomes(t, 2)
}

// TestReplayCrashHalfway: a replay that dies once its run is written — the
// phase message never sent, the run's bytes never kept — leaves one run,
// which the rescuer sends on: plain, and with corrected bytes it staged.
func TestReplayCrashHalfway(t *testing.T) {
	t.Parallel()
	f, fl := setupReplay(t, func(c *pipeline.Config) { c.RescueAfter = 500 * time.Millisecond })
	ctx := context.Background()
	a := f.Admin(t)
	st, err := store.Open(ctx, f.JS)
	require.NoError(t, err)

	plain := f.Own(t, capsuletest.New().Set("task.kind", "flaky"))
	f.Publish(t, plain.Sealed(t))
	require.Equal(t, capsule.Halted, f.Wait(t, plain.ID()).State)
	fl.down.Store(false)
	_, err = a.Apply(ctx, plain.ID(), machine.Replay{Token: "crashed", By: "op"})
	require.NoError(t, err)

	corrected := capsuletest.New().Set("target", "file:missing-"+capsuletest.NewID()+".txt")
	f.Publish(t, corrected.Sealed(t))
	require.Equal(t, capsule.Halted, f.Wait(t, corrected.ID()).State)
	fixed := f.Own(t, corrected).Sealed(t)
	d, err := capsule.Digest(fixed)
	require.NoError(t, err)
	require.NoError(t, st.StageBytes(ctx, corrected.ID(), d, fixed))
	_, err = a.Apply(ctx, corrected.ID(), machine.Replay{Token: "crashed", Digest: d, By: "op"})
	require.NoError(t, err)

	for _, id := range []string{plain.ID(), corrected.ID()} {
		s := f.Wait(t, id)
		require.Equal(t, capsule.Completed, s.State, "%s: halt %s", id, s.HaltReason)
		require.Equal(t, 2, s.Run)
	}
	f.RequireOutcomes(t, 4, "one outcome per run of each")
	raw, _, err := st.Raw(ctx, corrected.ID())
	require.NoError(t, err)
	require.Equal(t, string(fixed), string(raw), "the rescued run kept its corrected bytes")

	// Finishing the crashed replay (the same token) changes nothing more.
	r, err := a.Replay(ctx, plain.ID(), admin.ReplayOptions{By: "op", Token: "crashed"})
	require.NoError(t, err)
	require.Equal(t, 2, r.Capsule.Run)
	require.Equal(t, capsule.Completed, r.Capsule.State)
	natstest.Eventually(t, 5*time.Second, 20*time.Millisecond, func() bool { return f.CountOutcomes(t) == 4 }, "no outcome more")
}

// TestReplayDependents: replaying a halted capsule also replays the
// capsules halted dependency_failed on it, transitively; they wait for it
// and complete after it.
func TestReplayDependents(t *testing.T) {
	t.Parallel()
	f, fl := setupReplay(t, nil)
	ctx := context.Background()
	a := f.Admin(t)
	root := f.Own(t, capsuletest.New().Set("task.kind", "flaky"))
	mid := f.Own(t, capsuletest.New().Set("depends_on", []any{root.ID()}))
	leaf := f.Own(t, capsuletest.New().Set("depends_on", []any{mid.ID()}))
	f.Publish(t, root.Sealed(t))
	require.Equal(t, capsule.Halted, f.Wait(t, root.ID()).State)
	f.Publish(t, mid.Sealed(t))
	require.Equal(t, capsule.DependencyFailed(root.ID()).String(), f.Wait(t, mid.ID()).HaltReason)
	f.Publish(t, leaf.Sealed(t))
	require.Equal(t, capsule.DependencyFailed(mid.ID()).String(), f.Wait(t, leaf.ID()).HaltReason)

	fl.down.Store(false)
	r, err := a.Replay(ctx, root.ID(), admin.ReplayOptions{By: "op", Dependents: true})
	require.NoError(t, err)
	require.Len(t, r.Dependents, 2)
	require.Equal(t, mid.ID(), r.Dependents[0].CapsuleID)
	require.Equal(t, leaf.ID(), r.Dependents[1].CapsuleID)
	for _, d := range r.Dependents {
		require.Empty(t, d.Error)
		require.Equal(t, 2, d.Run)
	}
	for _, id := range []string{root.ID(), mid.ID(), leaf.ID()} {
		s := f.Wait(t, id)
		require.Equal(t, capsule.Completed, s.State, "%s: halt %s", id, s.HaltReason)
		require.Equal(t, 2, s.Run)
	}
	f.RequireOutcomes(t, 6)
}

// TestReplayCorrectionKeepsIdentity: a corrected capsule may change the
// work, not who the capsule is. Adding a parent, taking another producer
// agent or a wave is refused with a finding naming the field, and changes
// nothing; the same correction of the work alone runs.
func TestReplayCorrectionKeepsIdentity(t *testing.T) {
	t.Parallel()
	f, _ := setupReplay(t, nil)
	ctx := context.Background()
	a := f.Admin(t)
	// The parent is a real capsule, so only the identity rule refuses.
	parent := f.Own(t, capsuletest.New())
	f.Publish(t, parent.Sealed(t))
	require.Equal(t, capsule.Completed, f.Wait(t, parent.ID()).State)
	doc := capsuletest.New().Set("target", "file:missing-"+capsuletest.NewID()+".txt")
	f.Publish(t, doc.Sealed(t))
	require.Equal(t, capsule.Halted, f.Wait(t, doc.ID()).State)
	before, err := f.Client.Checkpoint(ctx, doc.ID())
	require.NoError(t, err)

	for field, v := range map[string]string{
		"parent_capsule_id": parent.ID(),
		"producer_agent_id": "mallory",
		"wave_id":           "w-" + capsuletest.NewID(),
	} {
		bad := f.Own(t, capsuletest.Doc(clone(t, doc))).Set(field, v)
		_, err := a.Replay(ctx, doc.ID(), admin.ReplayOptions{By: "op", Capsule: bad.Sealed(t)})
		require.ErrorIs(t, err, admin.ErrRefused, field)
		require.Contains(t, err.Error(), field+": a correction keeps who the capsule is", field)
	}
	after, err := f.Client.Checkpoint(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, before, after, "refused replays change nothing")

	fixed := f.Own(t, capsuletest.Doc(clone(t, doc))).Set("task.title", "Touch the README, corrected")
	_, err = a.Replay(ctx, doc.ID(), admin.ReplayOptions{By: "op", Capsule: fixed.Sealed(t)})
	require.NoError(t, err)
	s := f.Wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)
}

// clone is a deep copy of a capsule document (Set changes it in place).
func clone(t *testing.T, d capsuletest.Doc) map[string]any {
	t.Helper()
	var out map[string]any
	require.NoError(t, json.Unmarshal(d.Unsealed(t), &out))
	return out
}
