package pipeline_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

func countEvents(t *testing.T, f *fixture, id string) map[capsule.EventKind]int {
	t.Helper()
	return f.bundle.CountEvents(t, id)
}

// requireOutcomes requires the outcome stream to hold exactly n outcomes.
func requireOutcomes(t *testing.T, f *fixture, n uint64, msgAndArgs ...any) {
	t.Helper()
	f.bundle.RequireOutcomes(t, n, msgAndArgs...)
}

// TestPublishedTwiceRunsOnce: the same capsule published twice (before and
// after it completed) runs once.
func TestPublishedTwiceRunsOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	raw := capsuletest.New().Sealed(t)
	doc := capsuletest.Doc{}
	_ = doc
	id := idOf(t, raw)
	f.publish(t, raw)
	f.publish(t, raw)
	s := f.wait(t, id)
	require.Equal(t, capsule.Completed, s.State)
	f.publish(t, raw)
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		return countEvents(t, f, id)[capsule.EventDuplicateIgnored] == 2
	}, "two duplicate_ignored events")
	require.Equal(t, int64(1), f.executed.Load())
	s, err := f.client.Status(context.Background(), id)
	require.NoError(t, err)
	require.Len(t, s.History, 7)
	requireOutcomes(t, f, 1)
}

// TestSameIDOtherContentIsRefused: a second, different capsule under a taken
// id is kept under its own key and refused by Rule 2; the first is untouched.
func TestSameIDOtherContentIsRefused(t *testing.T) {
	t.Parallel()
	f := setup(t)
	first := capsuletest.New()
	f.publish(t, first.Sealed(t))
	require.Equal(t, capsule.Completed, f.wait(t, first.ID()).State)
	second := first.Set("task.title", "Something else")
	f.publish(t, second.Sealed(t))
	var other client.Status
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		list, err := f.client.List(context.Background(), capsule.Halted)
		if err != nil || len(list) != 1 {
			return false
		}
		other = list[0]
		return true
	}, "the second capsule halts")
	require.Equal(t, "absolute_rules_violated:[2]", other.HaltReason)
	require.Equal(t, first.ID(), other.CapsuleID)
	require.NotEqual(t, first.ID(), other.Key)
	s, err := f.client.Status(context.Background(), first.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.Completed, s.State)
}

// TestRedeliveryOfRecordedTransition: a phase message delivered again after its
// transition was recorded re-emits (de-duplicated) effects and changes nothing.
//
// The de-duplication window is a second here, and the redeliveries come after
// it: a repeated outcome would be stored again, so one outcome proves the
// acknowledged outcome is recorded (on the capsule's bytes) and not re-sent.
func TestRedeliveryOfRecordedTransition(t *testing.T) {
	t.Parallel()
	f := setupWith(t, func(c *pipeline.Config) { c.DuplicateWindow = time.Second })
	doc := capsuletest.New()
	raw := doc.Sealed(t)
	f.publish(t, raw)
	require.Equal(t, capsule.Completed, f.wait(t, doc.ID()).State)
	before := countEvents(t, f, doc.ID())
	str, err := f.js.Stream(context.Background(), "KV_"+store.CapsulesBucket)
	require.NoError(t, err)
	kept, err := str.GetLastMsgForSubject(context.Background(), "$KV."+store.CapsulesBucket+"."+doc.ID())
	require.NoError(t, err)
	require.Equal(t, "true", kept.Header.Get(store.HeaderOutcomeSent))
	require.Equal(t, raw, kept.Data)
	// Not a synchronisation: the point is to be past a time window.
	time.Sleep(1200 * time.Millisecond)

	for ph := 1; ph <= 6; ph++ {
		cycle := 0
		if ph >= 4 {
			cycle = 1
		}
		m := nats.NewMsg("saga.phase." + strconv.Itoa(ph))
		m.Data = raw
		m.Header.Set(store.HeaderKey, doc.ID())
		m.Header.Set(store.HeaderCycle, strconv.Itoa(cycle))
		_, err := f.js.PublishMsg(context.Background(), m)
		require.NoError(t, err)
	}
	waitDrained(t, f)
	require.Equal(t, int64(1), f.executed.Load())
	s, err := f.client.Status(context.Background(), doc.ID())
	require.NoError(t, err)
	require.Len(t, s.History, 7)
	require.Equal(t, before, countEvents(t, f, doc.ID()))
	requireOutcomes(t, f, 1)
}

// TestDuplicateDeliveryDuringExecution: the same EXECUTION message delivered
// twice while the executor runs: the executor runs once, history once.
func TestDuplicateDeliveryDuringExecution(t *testing.T) {
	t.Parallel()
	f := setup(t)
	doc := f.own(t, capsuletest.New().Set("task.kind", "slow"))
	raw := doc.Sealed(t)
	f.publish(t, raw)
	eventuallyExecuted(t, f, 1)

	m := nats.NewMsg("saga.phase.4")
	m.Data = raw
	m.Header.Set(store.HeaderKey, doc.ID())
	m.Header.Set(store.HeaderCycle, "1")
	_, err := f.js.PublishMsg(context.Background(), m)
	require.NoError(t, err)
	// Let the duplicate be tried (and refused by the claim) at least once.
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return consumerDelivered(t, f, 4) >= 2
	}, "duplicate delivered")
	f.gate <- struct{}{}
	s := f.wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State)
	waitDrained(t, f)
	require.Equal(t, int64(1), f.executed.Load())
	require.Len(t, s.History, 7)
}

// TestCrashMidExecutionFinishesOnce: a sagad that dies (its connection gone,
// nothing acked) while running an executor; another sagad takes the capsule
// over after the claim lease and it completes exactly once, with the retried
// call carrying the same idempotency key.
func TestCrashMidExecutionFinishesOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	// The dying instance: its own connection, a blocking executor.
	nc, err := nats.Connect(f.srv.ClientURL())
	require.NoError(t, err)
	js := mustJS(t, nc)
	var keys sync.Map
	dyingRuns := new(atomic.Int64)
	reg := executors.NewRegistry()
	block := make(chan struct{})
	reg.RegisterExecutor("crashy", recordKey{n: dyingRuns, keys: &keys, block: block})
	cfg := testConfig(t, f.workspace, reg)
	cfg.Rules.ExecutorKinds = []string{"crashy", "stub", "slow"}
	// The dead instance's goroutines outlive its connection; they must not
	// log into a finished test.
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	dying, err := pipeline.New(context.Background(), js, cfg)
	require.NoError(t, err)
	require.NoError(t, dying.Start(context.Background()))
	t.Cleanup(func() {
		close(block)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		dying.Stop(ctx)
	})

	// The surviving instance serves "crashy" without blocking.
	f.cfg.Executors.RegisterExecutor("crashy", recordKey{n: f.executed, keys: &keys})

	doc := f.own(t, capsuletest.New().Set("task.kind", "crashy"))
	// Only the dying instance may take phases until it dies: stop the
	// fixture's pipeline first, start a new survivor afterwards.
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	f.pipe.Stop(stopCtx)
	cancel()
	f.publish(t, doc.Sealed(t))
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool { return dyingRuns.Load() == 1 }, "dying instance runs the executor")

	nc.Close() // kill -9, as far as NATS can tell: no ack, no nak, no release

	survivorCfg := f.cfg
	survivorCfg.Rules.ExecutorKinds = []string{"crashy", "stub", "slow"}
	f.start(t, survivorCfg)
	s := f.wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State, s.HaltReason)
	require.Len(t, s.History, 7)
	require.Equal(t, int64(1), f.executed.Load(), "survivor ran the cycle once")
	k1, _ := keys.Load("first")
	k2, _ := keys.Load("last")
	require.Equal(t, k1, k2)
	requireOutcomes(t, f, 1)
	require.Equal(t, 1, countEvents(t, f, doc.ID())[capsule.EventCompleted])
}

// TestTwoInstancesRace: two sagads on one NATS system share the work; every
// capsule completes exactly once.
func TestTwoInstancesRace(t *testing.T) {
	t.Parallel()
	f := setup(t)
	nc, err := nats.Connect(f.srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js := mustJS(t, nc)
	second, err := pipeline.New(context.Background(), js, f.cfg)
	require.NoError(t, err)
	require.NoError(t, second.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		second.Stop(ctx)
	})
	const n = 60
	ids := make([]string, n)
	for i := range ids {
		d := f.own(t, capsuletest.New())
		if i%3 == 0 {
			d = d.Stub(map[string]any{"reviews": []any{"CHANGES_REQUESTED"}})
		}
		ids[i] = d.ID()
		f.publish(t, d.Sealed(t))
	}
	cycles := 0
	for i, id := range ids {
		s := f.wait(t, id)
		require.Equal(t, capsule.Completed, s.State, s.HaltReason)
		cycles += s.CyclesUsed
		want := 7
		if i%3 == 0 {
			want = 9
		}
		require.Len(t, s.History, want)
	}
	require.Equal(t, int64(cycles), f.executed.Load())
	requireOutcomes(t, f, n)
}

type recordKey struct {
	n     *atomic.Int64
	keys  *sync.Map
	block chan struct{}
}

func (r recordKey) Execute(ctx context.Context, req executors.Request) (executors.Result, error) {
	r.n.Add(1)
	r.keys.LoadOrStore("first", req.IdempotencyKey)
	r.keys.Store("last", req.IdempotencyKey)
	if r.block != nil {
		<-r.block // ignores ctx on purpose: a hung process
	}
	return executors.Stub{}.Execute(ctx, req)
}

func mustJS(t *testing.T, nc *nats.Conn) jetstreamJS {
	t.Helper()
	js, err := newJS(nc)
	require.NoError(t, err)
	return js
}

func consumerDelivered(t *testing.T, f *fixture, ph int) uint64 {
	t.Helper()
	cons, err := f.js.Consumer(context.Background(), store.PhaseStream(capsule.Phase(ph)), store.ConsumerName(capsule.Phase(ph)))
	require.NoError(t, err)
	info, err := cons.Info(context.Background())
	require.NoError(t, err)
	return info.Delivered.Consumer
}

// waitDrained waits until no phase has pending or unacknowledged messages.
func waitDrained(t *testing.T, f *fixture) {
	t.Helper()
	f.bundle.WaitDrained(t)
}

func idOf(t *testing.T, raw []byte) string {
	t.Helper()
	c, err := decodeCapsule(raw)
	require.NoError(t, err)
	return c.CapsuleID
}

// TestStaleCachedCheckpoint: the checkpoint changes behind the process that
// wrote it last (here: an outside write while the phase is paused). REVIEW
// starts from the stale cached copy: its claim loses the compare-and-set
// before the reviewer is called and it runs again on the real checkpoint.
// EXECUTION reads the checkpoint before taking locks. Either way the capsule
// completes once with the executor run once.
func TestStaleCachedCheckpoint(t *testing.T) {
	t.Parallel()
	for _, ph := range []capsule.Phase{capsule.Execution, capsule.ReviewPhase} {
		t.Run(ph.String(), func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			ctx := context.Background()
			a := f.admin(t)
			require.NoError(t, a.PausePhase(ctx, ph))
			raw := capsuletest.New().Sealed(t)
			id := idOf(t, raw)
			f.publish(t, raw)
			kv, err := f.js.KeyValue(ctx, store.CheckpointsBucket)
			require.NoError(t, err)
			// Queued at ph (EXECUTION's message names the deferred advances
			// of PLANNING and AUTOMATED_GATES, written with its claim).
			queued(t, f, ph, 1)
			// Same value, new revision: the process's cached copy is now behind.
			e, err := kv.Get(ctx, id)
			require.NoError(t, err)
			_, err = kv.Update(ctx, id, e.Value(), e.Revision())
			require.NoError(t, err)
			require.NoError(t, a.ResumePhase(ctx, ph))
			s := f.wait(t, id)
			require.Equal(t, capsule.Completed, s.State)
			require.Len(t, s.History, 7)
			require.Equal(t, int64(1), f.executed.Load())
			requireOutcomes(t, f, 1)
		})
	}
}
