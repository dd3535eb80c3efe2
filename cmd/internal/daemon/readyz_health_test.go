package daemon

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
)

// healthSetup runs a pipeline with a health monitor on s and returns what
// serves /readyz and /metrics for it.
type healthSetup struct {
	js     jetstream.JetStream
	nc     *nats.Conn
	p      *pipeline.Pipeline
	client *client.Client
	h      http.Handler
}

func newHealthSetup(t *testing.T, s *server.Server, cfg Config) healthSetup {
	t.Helper()
	nc, js := natstest.Connect(t, s)
	log := slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	reg, m, err := newRegistry(js, log)
	require.NoError(t, err)
	mon := newMonitor(cfg, log, m)
	t.Cleanup(mon.Stop)
	ctx := context.Background()
	p, err := pipeline.New(ctx, js, pipeline.Config{
		Logger: log, Workspace: capsuletest.Workspace(t), Metrics: m, Health: mon,
		RetryDelay: 50 * time.Millisecond, WriteTimeout: time.Duration(cfg.WriteTimeout),
	})
	require.NoError(t, err)
	cl, err := client.NewClient(ctx, js)
	require.NoError(t, err)
	var ready atomic.Bool
	ready.Store(true)
	return healthSetup{js: js, nc: nc, p: p, client: cl, h: httpHandler(nc, js, reg, &ready, mon)}
}

func (f healthSetup) start(t *testing.T) {
	t.Helper()
	require.NoError(t, f.p.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		f.p.Stop(ctx)
	})
}

func (f healthSetup) waitCompleted(t *testing.T, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := f.client.Wait(ctx, id)
	require.NoError(t, err)
	require.Equal(t, capsule.Completed, st.State, st.HaltReason)
}

// TestReadyzWhileJetStreamRefusesWrites: a JetStream whose storage is full
// refuses sagad's writes ("insufficient resources"); past --unhealthy-after
// /readyz fails saying so and the gauge is 1; once space is freed, all of it
// recovers by itself and the capsule completes.
func TestReadyzWhileJetStreamRefusesWrites(t *testing.T) {
	t.Parallel()
	s := natstest.RunServerWith(t, func(o *server.Options) { o.JetStreamMaxStore = 4 << 20 })
	f := newHealthSetup(t, s, Config{
		UnhealthyAfter: Duration(300 * time.Millisecond), StallAfter: Duration(time.Hour), WriteTimeout: Duration(2 * time.Second),
	})
	ctx := context.Background()
	doc := capsuletest.New()
	_, err := f.client.Publish(ctx, doc.Sealed(t), "")
	require.NoError(t, err)

	// Fill the store, then let sagad try to take the capsule in.
	_, err = f.js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILL", Subjects: []string{"fill"}})
	require.NoError(t, err)
	chunk := make([]byte, 64<<10)
	for i := 0; ; i++ {
		require.Less(t, i, 200, "the store never filled")
		if _, err := jspub.Publish(ctx, f.nc, &nats.Msg{Subject: "fill", Data: chunk}); err != nil {
			require.ErrorContains(t, err, "insufficient resources")
			break
		}
	}
	code, body := healthGet(t, f.h, "/readyz")
	require.Equal(t, http.StatusOK, code, body)
	f.start(t)

	natstest.Eventually(t, 15*time.Second, 20*time.Millisecond, func() bool {
		code, _ := healthGet(t, f.h, "/readyz")
		return code == http.StatusServiceUnavailable
	}, "/readyz never failed")
	code, body = healthGet(t, f.h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.True(t, strings.HasPrefix(body, "not ready: jetstream writes failing: SAGA_CAPSULES for "), body)
	require.Contains(t, body, "(storage)")
	require.Contains(t, body, "insufficient resources")
	_, metricsBody := healthGet(t, f.h, "/metrics")
	require.Contains(t, metricsBody, "\nsagad_jetstream_writes_failing 1\n")
	require.NotContains(t, metricsBody, "sagad_jetstream_write_errors_total{kind=\"storage\"} 0\n")

	// Space again: sagad recovers without help.
	require.NoError(t, f.js.DeleteStream(ctx, "FILL"))
	natstest.Eventually(t, 15*time.Second, 20*time.Millisecond, func() bool {
		code, _ := healthGet(t, f.h, "/readyz")
		return code == http.StatusOK
	}, "/readyz never recovered")
	f.waitCompleted(t, doc.ID())
	code, body = healthGet(t, f.h, "/readyz")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "ready\n", body)
	_, metricsBody = healthGet(t, f.h, "/metrics")
	require.Contains(t, metricsBody, "\nsagad_jetstream_writes_failing 0\n")
}

// TestReadyzReportsAStalledPhase: an operator paused PLANNING with a capsule
// queued: past --stall-after /readyz names the phase, its pending work and
// the pause; resumed, the capsule completes and /readyz is ready again.
func TestReadyzReportsAStalledPhase(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	f := newHealthSetup(t, s, Config{
		UnhealthyAfter: Duration(time.Hour), StallAfter: Duration(300 * time.Millisecond), WriteTimeout: Duration(5 * time.Second),
	})
	f.start(t)
	ctx := context.Background()
	require.NoError(t, f.p.Admin().PausePhase(ctx, capsule.Planning))
	doc := capsuletest.New()
	_, err := f.client.Publish(ctx, doc.Sealed(t), "")
	require.NoError(t, err)

	natstest.Eventually(t, 15*time.Second, 20*time.Millisecond, func() bool {
		code, _ := healthGet(t, f.h, "/readyz")
		return code == http.StatusServiceUnavailable
	}, "/readyz never reported the stall")
	code, body := healthGet(t, f.h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "not ready: phase 2 PLANNING stalled: 1 messages pending, no progress for ")
	require.Contains(t, body, "(its consumer is paused")

	require.NoError(t, f.p.Admin().ResumePhase(ctx, capsule.Planning))
	f.waitCompleted(t, doc.ID())
	natstest.Eventually(t, 15*time.Second, 20*time.Millisecond, func() bool {
		code, _ := healthGet(t, f.h, "/readyz")
		return code == http.StatusOK
	}, "/readyz never recovered")
}
