package metrics_test

import (
	"context"
	"encoding/json"
	"github.com/sagad/sagad/compose"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var names = metrics.Names{
	PhaseStream:         store.PhaseStream,
	ConsumerName:        store.ConsumerName,
	ContinuationsBucket: store.ContinuationsBucket,
	CompositionsBucket:  store.CompositionsBucket,
}

type fixture struct {
	js  jetstream.JetStream
	reg *prometheus.Registry
	m   *metrics.Metrics
}

// setup starts an embedded server with sagad's topology (pipeline.New, not
// started, so messages stay where the test puts them) and a registry holding
// the recorder and the collector.
func setup(t *testing.T) *fixture {
	t.Helper()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	_, err := pipeline.New(ctx, js, pipeline.Config{Workspace: t.TempDir()})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.BuildInfo{Version: "test"})
	col, err := metrics.NewJetStreamCollector(js, metrics.CollectorConfig{Names: names, Timeout: 5 * time.Second,
		CompositionState: compose.StateOfBytes})
	require.NoError(t, err)
	reg.MustRegister(col)
	return &fixture{js: js, reg: reg, m: m}
}

// gauges returns family name's values keyed by the value of its one label.
func gauges(t *testing.T, g prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			require.Len(t, m.GetLabel(), 1)
			out[m.GetLabel()[0].GetValue()] = value(mf.GetType(), m)
		}
	}
	return out
}

func value(t dto.MetricType, m *dto.Metric) float64 {
	if t == dto.MetricType_COUNTER {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

func publish(t *testing.T, js jetstream.JetStream, subject string, n int) {
	t.Helper()
	for range n {
		_, err := js.Publish(context.Background(), subject, []byte(`{}`))
		require.NoError(t, err)
	}
}

// fetch takes n messages of phase p's consumer without acknowledging them.
func fetch(t *testing.T, js jetstream.JetStream, p capsule.Phase, n int) []jetstream.Msg {
	t.Helper()
	cons, err := js.Consumer(context.Background(), store.PhaseStream(p), store.ConsumerName(p))
	require.NoError(t, err)
	batch, err := cons.Fetch(n, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	var out []jetstream.Msg
	for msg := range batch.Messages() {
		out = append(out, msg)
	}
	require.NoError(t, batch.Error())
	require.Len(t, out, n)
	return out
}

func TestCollectorReadsPhaseConsumers(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()

	// RECEPTION: 3 queued, 1 of them taken and not yet acknowledged.
	publish(t, f.js, store.PhaseSubject(capsule.Reception), 3)
	fetch(t, f.js, capsule.Reception, 1)
	// EXECUTION: 1 message delivered, refused, delivered again, unacknowledged.
	publish(t, f.js, store.PhaseSubject(capsule.Execution), 1)
	require.NoError(t, fetch(t, f.js, capsule.Execution, 1)[0].Nak())
	fetch(t, f.js, capsule.Execution, 1)
	// PLANNING: paused by an operator.
	_, err := f.js.PauseConsumer(ctx, store.PhaseStream(capsule.Planning), store.ConsumerName(capsule.Planning), time.Now().Add(time.Hour))
	require.NoError(t, err)

	zero := map[string]float64{}
	for p := capsule.Phase(0); p < capsule.NumPhases; p++ {
		zero[p.String()] = 0
	}
	with := func(kv map[string]float64) map[string]float64 {
		out := map[string]float64{}
		for k, v := range zero {
			out[k] = v
		}
		for k, v := range kv {
			out[k] = v
		}
		return out
	}
	require.Equal(t, with(map[string]float64{"RECEPTION": 2}), gauges(t, f.reg, "sagad_consumer_pending_messages"))
	require.Equal(t, with(map[string]float64{"RECEPTION": 1, "EXECUTION": 1}), gauges(t, f.reg, "sagad_consumer_ack_pending_messages"))
	require.Equal(t, with(map[string]float64{"EXECUTION": 1}), gauges(t, f.reg, "sagad_consumer_redelivered_messages"))
	require.Equal(t, with(map[string]float64{"RECEPTION": 3, "EXECUTION": 1}), gauges(t, f.reg, "sagad_capsules_in_phase"))
	require.Equal(t, with(map[string]float64{"PLANNING": 1}), gauges(t, f.reg, "sagad_phase_paused"))
	require.Equal(t, zero, gauges(t, f.reg, "sagad_phase_paused_seconds"), "an hour's pause by another tool cannot be dated")
	require.Zero(t, scrapeErrors(t, f.reg))
}

// TestCollectorPhasePausedSeconds: a phase paused by an operator reports
// how long ago, from its pause record or, without one, from its
// pause_until; a phase not paused reports 0 whatever its metadata.
func TestCollectorPhasePausedSeconds(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	now := time.Now()
	reg := prometheus.NewRegistry()
	col, err := metrics.NewJetStreamCollector(f.js, metrics.CollectorConfig{Names: names, Timeout: 5 * time.Second, Now: func() time.Time { return now }})
	require.NoError(t, err)
	reg.MustRegister(col)

	// EXECUTION: paused two hours ago, on the record.
	ex := store.PhaseStream(capsule.Execution)
	cons, err := f.js.Consumer(ctx, ex, store.ConsumerName(capsule.Execution))
	require.NoError(t, err)
	cfg := cons.CachedInfo().Config
	cfg.Metadata = capsule.PhasePause{By: "alice", At: now.Add(-2 * time.Hour)}.SetMetadata(cfg.Metadata)
	_, err = f.js.UpdateConsumer(ctx, ex, cfg)
	require.NoError(t, err)
	_, err = f.js.PauseConsumer(ctx, ex, store.ConsumerName(capsule.Execution), now.Add(capsule.PhasePauseHorizon))
	require.NoError(t, err)
	// REVIEW: paused three hours ago, no record (its pause_until tells).
	_, err = f.js.PauseConsumer(ctx, store.PhaseStream(capsule.ReviewPhase), store.ConsumerName(capsule.ReviewPhase), now.Add(-3*time.Hour).Add(capsule.PhasePauseHorizon))
	require.NoError(t, err)
	// HANDOFF: a record left behind, not paused.
	ho := store.PhaseStream(capsule.Handoff)
	cons, err = f.js.Consumer(ctx, ho, store.ConsumerName(capsule.Handoff))
	require.NoError(t, err)
	cfg = cons.CachedInfo().Config
	cfg.Metadata = capsule.PhasePause{At: now.Add(-time.Hour)}.SetMetadata(cfg.Metadata)
	_, err = f.js.UpdateConsumer(ctx, ho, cfg)
	require.NoError(t, err)

	got := gauges(t, reg, "sagad_phase_paused_seconds")
	require.Equal(t, 2*3600.0, got["EXECUTION"])
	require.InDelta(t, 3*3600.0, got["REVIEW"], 1)
	require.Zero(t, got["HANDOFF"])
	require.Zero(t, got["PLANNING"])
}

func TestCollectorCountsContinuationsByTrigger(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()

	got := gauges(t, f.reg, "sagad_capsules_paused")
	require.Len(t, got, len(metrics.Triggers))
	for _, v := range got {
		require.Zero(t, v)
	}

	kv, err := f.js.KeyValue(ctx, store.ContinuationsBucket)
	require.NoError(t, err)
	put := func(key string, tr capsule.Trigger) {
		b, err := json.Marshal(capsule.Continuation{SchemaVersion: "1.0", CapsuleID: key, Trigger: tr, CreatedAt: time.Now()})
		require.NoError(t, err)
		_, err = kv.Put(ctx, key, b)
		require.NoError(t, err)
	}
	put("a", capsule.TriggerBudgetWarning)
	put("b", capsule.TriggerBudgetWarning)
	put("c", capsule.TriggerOperatorManual)
	put("d", capsule.TriggerLockContention)
	require.NoError(t, kv.Delete(ctx, "d")) // resumed
	put("e", capsule.TriggerOperatorManual)
	put("e", capsule.TriggerBlockedExternal) // overwritten: counts once, by its latest value
	put("g", capsule.TriggerWaveCapacity)    // state waiting, for room in its wave
	_, err = kv.Put(ctx, "f", []byte("not json"))
	require.NoError(t, err)

	got = gauges(t, f.reg, "sagad_capsules_paused")
	// Every trigger of the table has its series, at 0 unless counted.
	want := map[string]float64{metrics.Other: 1}
	for _, tr := range metrics.Triggers {
		want[metrics.TriggerLabel(tr)] = 0
	}
	for label, n := range map[string]float64{"budget_warning": 2, "operator_manual": 1, "blocked_external": 1, "wave_capacity": 1} {
		require.Contains(t, want, label)
		want[label] = n
	}
	require.Equal(t, want, got)
	for _, label := range []string{"deadline_approaching", "lock_contention", "operator_gate", "dependencies"} {
		require.Contains(t, got, label)
		require.Zero(t, got[label], label)
	}
}

func TestCollectorSkipsFailedReads(t *testing.T) {
	t.Parallel()
	f := setup(t)
	require.NoError(t, f.js.DeleteStream(context.Background(), store.PhaseStream(capsule.AutomatedGates)))

	pending := gauges(t, f.reg, "sagad_consumer_pending_messages") // Gather itself does not fail
	require.Len(t, pending, capsule.NumPhases-1)
	require.NotContains(t, pending, "AUTOMATED_GATES")
	require.Contains(t, pending, "HANDOFF")
	require.Len(t, gauges(t, f.reg, "sagad_capsules_paused"), len(metrics.Triggers))
	require.InDelta(t, 3, scrapeErrors(t, f.reg), 0, "one failed read per scrape, three scrapes")
}

func TestCollectorNeedsNames(t *testing.T) {
	t.Parallel()
	_, err := metrics.NewJetStreamCollector(nil, metrics.CollectorConfig{})
	require.Error(t, err)
}

// TestRegistryPassesLint runs promlint over everything sagad exposes:
// names, units, suffixes and help texts follow the Prometheus conventions.
func TestRegistryPassesLint(t *testing.T) {
	t.Parallel()
	f := setup(t)
	touch(f.m)
	problems, err := testutil.GatherAndLint(f.reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// scrapeErrors gathers g and returns sagad_jetstream_scrape_errors_total.
func scrapeErrors(t *testing.T, g prometheus.Gatherer) float64 {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "sagad_jetstream_scrape_errors_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no sagad_jetstream_scrape_errors_total")
	return 0
}

// touch records one of everything, so every vector has a series.
func touch(m *metrics.Metrics) {
	m.Received()
	m.Transition(capsule.Execution, capsule.OutcomeHalted, time.Second)
	m.Ended(capsule.Completed, capsule.HaltReason{})
	m.Ended(capsule.Halted, capsule.BudgetExceeded(capsule.BudgetTokens))
	m.Ended(capsule.Cancelled, capsule.HaltReason{})
	m.ReviewCycle(capsule.Approved)
	m.RuleViolations([]int{7})
	m.LockWait(time.Second, true)
	m.Spend("stub", "w1", capsule.Usage{Tokens: 10, Dollars: 0.1}, true)
	m.Call(metrics.KindExecutor, metrics.ResultOK, time.Second)
	m.Redelivered(capsule.Execution)
	m.Paused(capsule.TriggerOperatorManual)
	m.Resumed(capsule.TriggerOperatorManual)
	m.AdminAction(metrics.ActionPause)
	m.WriteFailed(metrics.WriteStorage)
	m.WritesFailing(true)
	m.RedeliveredInFlight()
	m.CompositionStarted(4)
}

// TestCollectorCompositions: sagad_compositions counts the records by
// state, every known state present (0 when none is in it), and a record
// that is not one under "other".
func TestCollectorCompositions(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	kv, err := f.js.KeyValue(ctx, store.CompositionsBucket)
	require.NoError(t, err)
	put := func(key, state string) {
		b, err := json.Marshal(compose.Record{CompositionID: key, Steps: []string{"a"}, StepDigests: []string{"d"}, State: state})
		require.NoError(t, err)
		_, err = kv.Put(ctx, key, b)
		require.NoError(t, err)
	}
	put("c1", "")
	put("c2", "")
	put("c3", compose.StatePartial)
	put("c4", compose.StateCancelled)
	_, err = kv.Put(ctx, "c5", []byte("{not a record"))
	require.NoError(t, err)

	got := gauges(t, f.reg, "sagad_compositions")
	require.Equal(t, map[string]float64{"running": 2, "paused": 0, "completed": 0, "failed": 0, "partial": 1, "cancelled": 1, "other": 1}, got)
	require.Zero(t, scrapeErrors(t, f.reg))
}

func TestCollectorWithoutContinuationsBucket(t *testing.T) {
	t.Parallel()
	f := setup(t)
	require.NoError(t, f.js.DeleteKeyValue(context.Background(), store.ContinuationsBucket))

	got := gauges(t, f.reg, "sagad_capsules_paused")
	require.Len(t, got, len(metrics.Triggers), "a missing bucket means nothing is paused")
	for _, v := range got {
		require.Zero(t, v)
	}
	require.Zero(t, scrapeErrors(t, f.reg))
}

// TestCollectorOperatorGate: the operator_gate series is what
// AwaitingOperator says, and left out while it has not counted.
func TestCollectorOperatorGate(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv)
	m := metrics.New(nil, metrics.BuildInfo{})
	col, err := metrics.NewJetStreamCollector(js, metrics.CollectorConfig{
		Names:            metrics.Names{PhaseStream: func(capsule.Phase) string { return "NONE" }, ConsumerName: func(capsule.Phase) string { return "none" }, ContinuationsBucket: "NO_BUCKET"},
		Timeout:          5 * time.Second,
		AwaitingOperator: m.AwaitingOperatorCount,
	})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)
	gate := func() (float64, bool) {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			for _, s := range mf.GetMetric() {
				for _, l := range s.GetLabel() {
					if mf.GetName() == "sagad_capsules_paused" && l.GetValue() == "operator_gate" {
						return s.GetGauge().GetValue(), true
					}
				}
			}
		}
		return 0, false
	}
	_, found := gate()
	require.False(t, found, "not counted yet: no series")
	m.AwaitingOperator(4)
	v, found := gate()
	require.True(t, found)
	require.Equal(t, 4.0, v)
}
