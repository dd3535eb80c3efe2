package health_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sagad/sagad/health"
	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestKind(t *testing.T) {
	t.Parallel()
	api := func(code int, errCode jetstream.ErrorCode) error {
		return fmt.Errorf("write checkpoint k: %w", &jetstream.APIError{Code: code, ErrorCode: errCode, Description: "x"})
	}
	for _, tt := range []struct {
		name   string
		err    error
		kind   string
		failed bool
	}{
		{"success", nil, "", false},
		{"lost compare-and-set", api(400, jetstream.JSErrCodeStreamWrongLastSequence), "", false},
		{"key exists", jetstream.ErrKeyExists, "", false},
		{"key not found", fmt.Errorf("delete: %w", jetstream.ErrKeyNotFound), "", false},
		{"bad request", api(400, jetstream.JSErrCodeStreamMessageExceedsMaximum), "", false},
		{"insufficient resources", api(503, 10023), metrics.WriteStorage, true},
		{"account limits", api(400, 10002), metrics.WriteStorage, true},
		{"storage exceeded", api(500, 10047), metrics.WriteStorage, true},
		{"store failed", api(503, 10077), metrics.WriteStorage, true},
		{"no quorum", api(503, 10008), metrics.WriteUnavailable, true},
		{"jetstream disabled", jetstream.ErrJetStreamNotEnabled, metrics.WriteUnavailable, true},
		{"deadline", fmt.Errorf("publish x: %w", context.DeadlineExceeded), metrics.WriteTimeout, true},
		{"nats timeout", nats.ErrTimeout, metrics.WriteTimeout, true},
		{"no responders", fmt.Errorf("publish x: %w", nats.ErrNoResponders), metrics.WriteNoResponders, true},
		{"no stream response", jetstream.ErrNoStreamResponse, metrics.WriteNoResponders, true},
		{"closed", nats.ErrConnectionClosed, metrics.WriteConnection, true},
		{"reconnecting", nats.ErrConnectionReconnecting, metrics.WriteConnection, true},
		{"unknown", errors.New("boom"), metrics.Other, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kind, failed := health.Kind(tt.err)
			require.Equal(t, tt.kind, kind)
			require.Equal(t, tt.failed, failed)
		})
	}
}

// syncBuffer is a log destination tests read while the monitor writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type fixture struct {
	mon  *health.Monitor
	reg  *prometheus.Registry
	logs *syncBuffer
}

func newMonitor(t *testing.T, cfg health.Config) fixture {
	t.Helper()
	reg := prometheus.NewRegistry()
	logs := &syncBuffer{}
	cfg.Metrics = metrics.New(reg, metrics.BuildInfo{})
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	mon := health.New(cfg)
	t.Cleanup(mon.Stop)
	return fixture{mon: mon, reg: reg, logs: logs}
}

func gauge(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	n, err := testutil.GatherAndCount(reg, "sagad_jetstream_writes_failing")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "sagad_jetstream_writes_failing" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no gauge")
	return 0
}

func writeErrors(t *testing.T, reg *prometheus.Registry, kind string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "sagad_jetstream_write_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestWritesFailingOnAFullStore: a server whose JetStream storage is full
// refuses writes ("insufficient resources"); once that lasted UnhealthyAfter
// the monitor is unhealthy, logs it once at ERROR and raises the gauge, and
// the first write that succeeds after space is freed recovers all of it.
func TestWritesFailingOnAFullStore(t *testing.T) {
	t.Parallel()
	s := natstest.RunServerWith(t, func(o *server.Options) { o.JetStreamMaxStore = 1 << 20 })
	nc, js := natstest.Connect(t, s)
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILL", Subjects: []string{"fill"}})
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "W", Subjects: []string{"w"}})
	require.NoError(t, err)

	f := newMonitor(t, health.Config{UnhealthyAfter: 300 * time.Millisecond})
	w := &jspub.Writes{Timeout: 2 * time.Second, Observe: f.mon.ObserveWrite}
	write := func() error {
		_, err := jspub.Write(ctx, w, func(ctx context.Context) (uint64, error) {
			return jspub.Publish(ctx, nc, &nats.Msg{Subject: "w", Data: []byte("x")})
		})
		return err
	}
	require.NoError(t, write())
	require.NoError(t, f.mon.Writes())

	// Fill the store.
	chunk := make([]byte, 64<<10)
	for i := 0; ; i++ {
		require.Less(t, i, 100, "the store never filled")
		if _, err := jspub.Publish(ctx, nc, &nats.Msg{Subject: "fill", Data: chunk}); err != nil {
			require.ErrorContains(t, err, "insufficient resources")
			break
		}
	}
	err = write()
	require.ErrorContains(t, err, "insufficient resources")
	require.Equal(t, 1.0, writeErrors(t, f.reg, metrics.WriteStorage))
	require.NoError(t, f.mon.Writes(), "not yet: failing for less than UnhealthyAfter")
	require.Zero(t, gauge(t, f.reg))

	natstest.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool { return f.mon.Writes() != nil }, "never unhealthy")
	err = f.mon.Writes()
	require.ErrorIs(t, err, health.ErrWritesFailing)
	require.ErrorContains(t, err, "(storage)")
	require.ErrorContains(t, err, "insufficient resources")
	require.Equal(t, 1.0, gauge(t, f.reg))
	require.Error(t, write(), "still full")
	require.Equal(t, 1, strings.Count(f.logs.String(), "level=ERROR"), f.logs.String())
	require.Contains(t, f.logs.String(), "jetstream writes are failing")

	// Free the space: the next write succeeds and everything recovers.
	require.NoError(t, js.DeleteStream(ctx, "FILL"))
	require.NoError(t, write())
	require.NoError(t, f.mon.Writes())
	require.Zero(t, gauge(t, f.reg))
	require.Contains(t, f.logs.String(), `level=INFO msg="jetstream writes succeed again"`)
	require.Equal(t, 1, strings.Count(f.logs.String(), "level=ERROR"), "one ERROR line when failing, none when recovered")
	require.Equal(t, 2.0, writeErrors(t, f.reg, metrics.WriteStorage))
}

// TestWritesFailingWhileTheServerIsGone: writes time out after the write
// timeout (not the caller's longer deadline) while the server is down, and
// succeed again once it is back on the same port and store directory.
func TestWritesFailingWhileTheServerIsGone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opts := func(port int) *server.Options {
		return &server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true}
	}
	s, err := server.NewServer(opts(-1))
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	url := s.ClientURL()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "W", Subjects: []string{"w"}})
	require.NoError(t, err)

	f := newMonitor(t, health.Config{UnhealthyAfter: 200 * time.Millisecond})
	w := &jspub.Writes{Timeout: 100 * time.Millisecond, Observe: f.mon.ObserveWrite}
	write := func() error {
		long, cancel := context.WithTimeout(ctx, time.Minute) // a phase's deadline
		defer cancel()
		_, err := jspub.Write(long, w, func(ctx context.Context) (uint64, error) {
			return jspub.Publish(ctx, nc, &nats.Msg{Subject: "w", Data: []byte("x")})
		})
		return err
	}
	require.NoError(t, write())

	s.Shutdown()
	s.WaitForShutdown()
	start := time.Now()
	err = write()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 5*time.Second, "the write timeout bounds the write, not the caller's minute")
	natstest.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool { return f.mon.Writes() != nil }, "never unhealthy")
	require.ErrorContains(t, f.mon.Writes(), "(timeout)")
	require.Equal(t, 1.0, gauge(t, f.reg))

	// Back on the same port and store directory.
	var p int
	_, err = fmt.Sscanf(url[strings.LastIndex(url, ":")+1:], "%d", &p)
	require.NoError(t, err)
	s2, err := server.NewServer(opts(p))
	require.NoError(t, err)
	go s2.Start()
	t.Cleanup(func() { s2.Shutdown(); s2.WaitForShutdown() })
	require.True(t, s2.ReadyForConnections(10*time.Second))
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool { return write() == nil }, "writes never succeeded again")
	require.NoError(t, f.mon.Writes())
	require.Zero(t, gauge(t, f.reg))
}

// TestWritesRefusedAreNoFailure: a lost compare-and-set or a taken key is
// JetStream working: no failure is counted, none starts a run.
func TestWritesRefusedAreNoFailure(t *testing.T) {
	t.Parallel()
	f := newMonitor(t, health.Config{UnhealthyAfter: time.Hour})
	f.mon.ObserveWrite("W", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence})
	f.mon.ObserveWrite("W", jetstream.ErrKeyExists)
	f.mon.ObserveWrite("W", nil)
	for _, k := range metrics.WriteErrorKinds {
		require.Zero(t, writeErrors(t, f.reg, k), k)
	}
	require.NoError(t, f.mon.Writes())
}

// TestWritesFailingOnOneStreamWhileOthersSucceed: a stream at its store
// limit refuses every write while another stream takes its own. The
// successes elsewhere must not hide it (they reset a single failure clock
// before): within UnhealthyAfter one ERROR line names the stream and the
// cause, the gauge is 1 and Writes fails; a write to the stream that
// succeeds after space is freed recovers all of it.
func TestWritesFailingOnOneStreamWhileOthersSucceed(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)
	ctx := context.Background()
	lim, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LIMITED", Subjects: []string{"limited"}, MaxBytes: 4 << 10, Discard: jetstream.DiscardNew})
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "OK", Subjects: []string{"ok"}})
	require.NoError(t, err)

	const window = 300 * time.Millisecond
	f := newMonitor(t, health.Config{UnhealthyAfter: window})
	w := &jspub.Writes{Timeout: 2 * time.Second, Observe: f.mon.ObserveWrite}
	limited, ok := w.On("LIMITED"), w.On("OK")
	write := func(w *jspub.Writes, subject string) error {
		_, err := w.Publish(ctx, nc, &nats.Msg{Subject: subject, Data: make([]byte, 1<<10)})
		return err
	}
	var err2 error
	for i := 0; err2 == nil; i++ {
		require.Less(t, i, 100, "the stream never reached its limit")
		err2 = write(limited, "limited")
	}
	require.ErrorContains(t, err2, "maximum bytes exceeded")
	require.Equal(t, health.CauseStoreLimit, health.Cause(err2))

	// The other stream keeps taking writes, faster than the window.
	start := time.Now()
	natstest.Eventually(t, 5*time.Second, 20*time.Millisecond, func() bool {
		require.NoError(t, write(ok, "ok"))
		require.Error(t, write(limited, "limited"))
		return f.mon.Writes() != nil
	}, "never unhealthy while one stream refuses every write")
	require.Less(t, time.Since(start), window+2*time.Second)
	err = f.mon.Writes()
	require.ErrorIs(t, err, health.ErrWritesFailing)
	require.ErrorContains(t, err, "LIMITED")
	require.ErrorContains(t, err, "store limit")
	require.Equal(t, 1.0, gauge(t, f.reg))
	logs := f.logs.String()
	require.Equal(t, 1, strings.Count(logs, "level=ERROR"), logs)
	require.Contains(t, logs, "target=LIMITED")
	require.Contains(t, logs, `cause="store limit"`)

	// Space freed: the next write to the stream recovers everything.
	require.NoError(t, lim.Purge(ctx))
	require.NoError(t, write(ok, "ok"))
	require.Error(t, f.mon.Writes(), "a success elsewhere is no recovery")
	require.NoError(t, write(limited, "limited"))
	require.NoError(t, f.mon.Writes())
	require.Zero(t, gauge(t, f.reg))
	require.Equal(t, 1, strings.Count(f.logs.String(), "level=ERROR"), f.logs.String())
	require.Contains(t, f.logs.String(), `level=INFO msg="jetstream writes succeed again"`)
}

// TestWritesFailingTargetForgotten: a target nothing writes to any more for
// twice the window, while others take their writes, no longer keeps sagad
// unhealthy (a rarely written bucket would otherwise hold /readyz at 503
// long after space came back).
func TestWritesFailingTargetForgotten(t *testing.T) {
	t.Parallel()
	const window = 200 * time.Millisecond
	f := newMonitor(t, health.Config{UnhealthyAfter: window})
	full := &jetstream.APIError{Code: 503, ErrorCode: 10023, Description: "insufficient resources"}
	f.mon.ObserveWrite("RARE", full)
	natstest.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool { return f.mon.Writes() != nil }, "never unhealthy")
	require.ErrorContains(t, f.mon.Writes(), "RARE")
	require.ErrorContains(t, f.mon.Writes(), "insufficient resources")
	f.mon.ObserveWrite("RARE", full) // retried: its run goes on
	f.mon.ObserveWrite("OTHER", nil)
	require.Error(t, f.mon.Writes(), "failed within twice the window: still failing")
	natstest.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool {
		f.mon.ObserveWrite("OTHER", nil)
		return f.mon.Writes() == nil
	}, "a target written no more kept sagad unhealthy")
	require.Zero(t, gauge(t, f.reg))
}

func TestCause(t *testing.T) {
	t.Parallel()
	api := func(code int, errCode jetstream.ErrorCode) error {
		return fmt.Errorf("publish x: %w", &jetstream.APIError{Code: code, ErrorCode: errCode, Description: "x"})
	}
	for err, want := range map[error]string{
		api(503, 10023): health.CauseInsufficientResources,
		api(500, 10047): health.CauseInsufficientResources,
		api(503, 10077): health.CauseStoreLimit,
		api(503, 10008): health.CauseUnavailable,
		fmt.Errorf("x: %w", context.DeadlineExceeded): health.CauseTimeouts,
		nats.ErrNoResponders:                          health.CauseNoResponders,
		nats.ErrConnectionClosed:                      health.CauseConnection,
		errors.New("boom"):                            health.CauseOther,
	} {
		require.Equal(t, want, health.Cause(err), "%v", err)
	}
}
