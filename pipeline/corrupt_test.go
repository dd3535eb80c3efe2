package pipeline_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/locks"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// logLines keeps every log line (and passes it to t.Log).
type logLines struct {
	t  testing.TB
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Log(string(p))
	return l.b.Write(p)
}

// count returns how many lines hold every one of subs.
func (l *logLines) count(subs ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range strings.Split(l.b.String(), "\n") {
		all := line != ""
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			n++
		}
	}
	return n
}

// corruptFixture is a pipeline whose logs and metrics a test reads.
type corruptFixture struct {
	*fixture
	logs *logLines
	reg  *prometheus.Registry
	nc   *nats.Conn
}

func corruptSetup(t *testing.T) *corruptFixture {
	t.Helper()
	logs := &logLines{t: t}
	reg := prometheus.NewRegistry()
	f := setupWith(t, func(c *pipeline.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		c.Metrics = metrics.New(reg, metrics.BuildInfo{})
		c.SweepInterval = 50 * time.Millisecond
	})
	nc, _ := natstest.Connect(t, f.srv)
	return &corruptFixture{fixture: f, logs: logs, reg: reg, nc: nc}
}

// corruptCount reads sagad_corrupt_values_total{bucket}.
func (f *corruptFixture) corruptCount(t *testing.T, bucket string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "sagad_corrupt_values_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "bucket" && l.GetValue() == bucket {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// redirectAck plays a producer allowed to publish on the intake subject
// and nothing else: it names subject (a key of one of sagad's buckets) as
// the reply of an intake publish whose expectation fails, so JetStream
// stores nothing and sends its error answer, JSON of its own, to subject.
// It returns once subject holds that answer.
func (f *corruptFixture) redirectAck(t *testing.T, bucket, key string) {
	t.Helper()
	m := nats.NewMsg(store.IntakeSubject)
	m.Reply = "$KV." + bucket + "." + key
	m.Header.Set(jetstream.ExpectedLastSeqHeader, "999999999")
	m.Data = []byte(`{}`)
	require.NoError(t, f.nc.PublishMsg(m))
	kv, err := f.js.KeyValue(context.Background(), bucket)
	require.NoError(t, err)
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		e, err := kv.Get(context.Background(), key)
		return err == nil && bytes.Contains(e.Value(), []byte(`"error"`))
	}, "the acknowledgement landed on %s %s", bucket, key)
}

// putGarbage writes bytes that are no JSON at all under key.
func (f *corruptFixture) putGarbage(t *testing.T, bucket, key string) {
	t.Helper()
	kv, err := f.js.KeyValue(context.Background(), bucket)
	require.NoError(t, err)
	_, err = kv.Put(context.Background(), key, []byte("\x00garbage\xff"))
	require.NoError(t, err)
}

// requireReportedOnce: the value was counted once and logged once at ERROR,
// and no line about the key repeats in a retry loop.
func (f *corruptFixture) requireReportedOnce(t *testing.T, bucket, key string) {
	t.Helper()
	require.Equal(t, float64(1), f.corruptCount(t, bucket), "counted once")
	require.Equal(t, 1, f.logs.count("level=ERROR", "bucket="+bucket, "key="+key), "logged once at ERROR")
	require.LessOrEqual(t, f.logs.count(key), 4, "no retry storm about %s", key)
}

// TestCorruptCheckpointHaltsRunningCapsule: a checkpoint replaced under a
// running capsule (by an acknowledgement redirected onto it, or by bytes
// that are no JSON) halts it state_corrupt:SAGA_CHECKPOINTS, reported
// once, instead of freezing it or retrying forever.
func TestCorruptCheckpointHaltsRunningCapsule(t *testing.T) {
	t.Parallel()
	for name, write := range map[string]func(f *corruptFixture, t *testing.T, key string){
		"redirected ack": func(f *corruptFixture, t *testing.T, key string) { f.redirectAck(t, store.CheckpointsBucket, key) },
		"garbage":        func(f *corruptFixture, t *testing.T, key string) { f.putGarbage(t, store.CheckpointsBucket, key) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := corruptSetup(t)
			doc := f.own(t, capsuletest.New().Set("task.kind", "slow"))
			f.publish(t, doc.Sealed(t))
			eventuallyExecuted(t, f.fixture, 1)
			write(f, t, doc.ID())
			select { // the executor answers (unless the lost claim stopped it)
			case f.gate <- struct{}{}:
			case <-time.After(2 * time.Second):
			}
			s := f.wait(t, doc.ID())
			require.Equal(t, capsule.Halted, s.State)
			require.Equal(t, "state_corrupt:SAGA_CHECKPOINTS", s.HaltReason)
			f.requireReportedOnce(t, corrupt.Checkpoints, doc.ID())
		})
	}
}

// TestCorruptCheckpointAtFutureKey: an acknowledgement redirected onto the
// key of a capsule not yet published does not starve RECEPTION: the capsule
// takes its key over and completes.
func TestCorruptCheckpointAtFutureKey(t *testing.T) {
	t.Parallel()
	f := corruptSetup(t)
	doc := f.own(t, capsuletest.New())
	f.redirectAck(t, store.CheckpointsBucket, doc.ID())
	f.publish(t, doc.Sealed(t))
	s := f.wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)
	f.requireReportedOnce(t, corrupt.Checkpoints, doc.ID())
}

// TestCorruptLockIsTakenOver: a lock value sagad did not write (an
// acknowledgement redirected onto the lock's key, or garbage) holds
// nothing: capsules needing the path run, instead of RECEPTION retrying
// forever.
func TestCorruptLockIsTakenOver(t *testing.T) {
	t.Parallel()
	for name, write := range map[string]func(f *corruptFixture, t *testing.T, key string){
		"redirected ack": func(f *corruptFixture, t *testing.T, key string) { f.redirectAck(t, "SAGA_LOCKS", key) },
		"garbage":        func(f *corruptFixture, t *testing.T, key string) { f.putGarbage(t, "SAGA_LOCKS", key) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := corruptSetup(t)
			doc := f.own(t, capsuletest.New())
			path := "own-" + doc.ID() + ".txt"
			write(f, t, locks.Key(path))
			f.publish(t, doc.Sealed(t))
			s := f.wait(t, doc.ID())
			require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)
			f.requireReportedOnce(t, corrupt.Locks, locks.Key(path))
		})
	}
}

// TestCorruptWaveRecordHalts: a closed wave whose record is replaced by an
// acknowledgement (which decodes into an open wave without caps) or by
// garbage is not reopened: its capsules halt state_corrupt:SAGA_BUDGETS.
func TestCorruptWaveRecordHalts(t *testing.T) {
	t.Parallel()
	for name, write := range map[string]func(f *corruptFixture, t *testing.T, key string){
		"redirected ack": func(f *corruptFixture, t *testing.T, key string) { f.redirectAck(t, "SAGA_BUDGETS", key) },
		"garbage":        func(f *corruptFixture, t *testing.T, key string) { f.putGarbage(t, "SAGA_BUDGETS", key) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := corruptSetup(t)
			ctx := context.Background()
			_, err := f.pipe.Store().Budgets.ChangeWave(ctx, "wz", budget.WaveChange{Tokens: ptr(int64(1000)), Close: true})
			require.NoError(t, err)
			write(f, t, "wave.wz")
			doc := waveDoc(t, f.fixture, "wz", "stub")
			f.publish(t, doc.Sealed(t))
			s := f.wait(t, doc.ID())
			require.Equal(t, capsule.Halted, s.State)
			require.Equal(t, "state_corrupt:SAGA_BUDGETS", s.HaltReason)
			require.Zero(t, f.executed.Load(), "nothing ran")
			f.requireReportedOnce(t, corrupt.Budgets, "wave.wz")
		})
	}
}

// TestCorruptDependencyFails: a dependency whose checkpoint sagad did not
// write will never complete: its dependents halt dependency_failed instead
// of waiting forever.
func TestCorruptDependencyFails(t *testing.T) {
	t.Parallel()
	f := corruptSetup(t)
	dep := capsuletest.New()
	f.redirectAck(t, store.CheckpointsBucket, dep.ID())
	waiter := f.own(t, capsuletest.New().Set("depends_on", []any{dep.ID()}))
	f.publish(t, waiter.Sealed(t))
	s := f.wait(t, waiter.ID())
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, "dependency_failed:"+dep.ID(), s.HaltReason)
	f.requireReportedOnce(t, corrupt.Checkpoints, dep.ID())
}

// TestCorruptBudgetRecordHalts: a wave capsule's budget record replaced by
// an acknowledgement (which would read as nothing spent) halts the capsule
// state_corrupt:SAGA_BUDGETS when it is charged, instead of retrying.
func TestCorruptBudgetRecordHalts(t *testing.T) {
	t.Parallel()
	f := corruptSetup(t)
	_, err := f.pipe.Store().Budgets.ChangeWave(context.Background(), "wb", budget.WaveChange{Tokens: ptr(int64(5000))})
	require.NoError(t, err)
	doc := waveDoc(t, f.fixture, "wb", "stub") // a wave's capsule: its spending is kept in SAGA_BUDGETS
	f.redirectAck(t, "SAGA_BUDGETS", "capsule."+doc.ID())
	f.publish(t, doc.Sealed(t))
	s := f.wait(t, doc.ID())
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, "state_corrupt:SAGA_BUDGETS", s.HaltReason)
	f.requireReportedOnce(t, corrupt.Budgets, "capsule."+doc.ID())
}

// TestCompletionForCorruptCheckpointEnds: a worker's completion for a
// capsule whose checkpoint was replaced by a value sagad did not write is
// terminated (state_corrupt), not redelivered forever.
func TestCompletionForCorruptCheckpointEnds(t *testing.T) {
	t.Parallel()
	f := corruptSetup(t)
	doc := f.own(t, capsuletest.New().Set("task.kind", "accepting"))
	f.publish(t, doc.Sealed(t))
	f.waitState(t, doc.ID(), capsule.Paused)
	right := f.completion(t, `{"kind":"execute","status":"ok","content":{"answer":42},"usage":{"tokens":5,"dollars":0.001}}`)
	f.putGarbage(t, store.CheckpointsBucket, doc.ID())
	_, err := f.js.Publish(context.Background(), executors.CompletionSubject(doc.ID(), 1), right)
	require.NoError(t, err)
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return terminated(t, f.reg, metrics.TermStateCorrupt) == 1
	}, "the completion is terminated")
	f.requireReportedOnce(t, corrupt.Checkpoints, doc.ID())
}
