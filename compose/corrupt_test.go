package compose_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/store"
)

// logLines keeps every log line a logger writes.
type logLines struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// count returns how many lines hold every one of subs.
func (l *logLines) count(subs ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for line := range strings.Lines(l.b.String()) {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			n++
		}
	}
	return n
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestCompositionCorruptRecord: a run's record overwritten with bytes
// sagad never writes, then its step ends: the runner terminates the step
// end's message at its first delivery (state_corrupt, counted), logs it
// once at ERROR, and nothing comes back; the record is left as it is, and
// reading it says it is corrupt.
func TestCompositionCorruptRecord(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	f.runner.Stop() // the step ends while the record is garbage
	r, err := f.composeAs(t, "bob", f.compositionDoc(t, "garbled", []step{{name: "only", kind: "produce"}}, nil))
	require.NoError(t, err)
	kv, err := f.js.KeyValue(ctx, store.CompositionsBucket)
	require.NoError(t, err)
	sum := sha256.Sum256([]byte("garbled"))
	key := hex.EncodeToString(sum[:20]) + ".bob"
	_, err = kv.Get(ctx, key)
	require.NoError(t, err, "the run's record is under %s", key)
	_, err = kv.Put(ctx, key, []byte(`{"chain_id":"garbled","steps":"not a list"}`))
	require.NoError(t, err)
	require.Equal(t, capsule.Completed, f.ended(t, r.Steps[0].CapsuleID).State.Status)

	logs := &logLines{}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.BuildInfo{})
	runner, err := compose.StartRunner(ctx, f.st, compose.RunnerConfig{
		Logger: slog.New(slog.NewTextHandler(logs, nil)), Metrics: m, AckWait: 2 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(runner.Stop)

	cons, err := f.js.Consumer(ctx, store.OutcomesStream, compose.RunnerConsumer)
	require.NoError(t, err)
	natstest.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool {
		info, err := cons.Info(ctx)
		require.NoError(t, err)
		return info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Consumer > 0 &&
			logs.count("level=ERROR") > 0
	}, "the step end was never settled: %s", logs)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.NumRedelivered, "terminated at its first delivery, never redelivered")
	require.Zero(t, info.NumAckPending)
	require.Equal(t, 1, logs.count("level=ERROR"), logs.String())
	require.Equal(t, 1, logs.count("level=ERROR", "cause="+metrics.TermStateCorrupt, store.CompositionsBucket, key), logs.String())
	require.Zero(t, logs.count("level=WARN"), "not retried: %s", logs)
	n, err := testutil.GatherAndCount(reg, "sagad_messages_terminated_total")
	require.NoError(t, err)
	require.Positive(t, n)
	require.Equal(t, 1.0, terminated(t, reg, metrics.TermStateCorrupt))

	_, err = compose.GetRun(ctx, f.st, "garbled", "bob", 1)
	require.ErrorIs(t, err, corrupt.ErrCorrupt)
	_, err = compose.Find(ctx, f.st, "garbled", nil, 0)
	require.ErrorIs(t, err, corrupt.ErrCorrupt, "composition status says so")
	e, _ := kv.Get(ctx, key)
	require.JSONEq(t, `{"chain_id":"garbled","steps":"not a list"}`, string(e.Value()), "left as it is, for a person to look at")
}

// terminated is sagad_messages_terminated_total{cause} in reg.
func terminated(t *testing.T, reg *prometheus.Registry, cause string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "sagad_messages_terminated_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cause" && l.GetValue() == cause {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
