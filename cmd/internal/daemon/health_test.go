package daemon

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// healthGet serves one GET through h and returns the status and body.
func healthGet(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	b, err := io.ReadAll(rec.Result().Body)
	require.NoError(t, err)
	return rec.Code, string(b)
}

func TestReadyzExplainsWhatIsMissing(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)
	log := slog.New(slog.NewTextHandler(tlogWriter{t}, nil))
	reg, _, err := newRegistry(js, log)
	require.NoError(t, err)
	var ready atomic.Bool
	h := httpHandler(nc, js, reg, &ready, nil)

	code, body := healthGet(t, h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "not ready: pipeline not running\n", body)

	ready.Store(true)
	code, body = healthGet(t, h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "not ready: stream SAGA_INTAKE: ")

	ctx := context.Background()
	_, err = pipeline.New(ctx, js, pipeline.Config{Workspace: t.TempDir()})
	require.NoError(t, err)
	code, body = healthGet(t, h, "/readyz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ready\n", body)

	require.NoError(t, js.DeleteKeyValue(ctx, store.CheckpointsBucket))
	code, body = healthGet(t, h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "not ready: bucket SAGA_CHECKPOINTS: ")

	code, body = healthGet(t, h, "/healthz")
	require.Equal(t, http.StatusOK, code, "liveness does not depend on NATS")
	require.Equal(t, "ok\n", body)

	nc.Close()
	code, body = healthGet(t, h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "not ready: nats CLOSED\n", body)
	code, _ = healthGet(t, h, "/healthz")
	require.Equal(t, http.StatusOK, code)
}

// TestMetricsFromARunningPipeline: the registry Run builds is the one the
// pipeline records on, and /metrics serves it with the JetStream gauges.
func TestMetricsFromARunningPipeline(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)
	log := slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	reg, m, err := newRegistry(js, log)
	require.NoError(t, err)
	ctx := context.Background()
	p, err := pipeline.New(ctx, js, pipeline.Config{Logger: log, Workspace: capsuletest.Workspace(t), Metrics: m})
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	var ready atomic.Bool
	ready.Store(true)
	h := httpHandler(nc, js, reg, &ready, nil)

	client, err := client.NewClient(ctx, js)
	require.NoError(t, err)
	doc := capsuletest.New()
	_, err = client.Publish(ctx, doc.Sealed(t), "")
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	st, err := client.Wait(wctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.Completed, st.State, st.HaltReason)

	// The checkpoint that Wait sees is written before HANDOFF counts its
	// transition: the last counts may come a moment after it.
	var body string
	require.Eventually(t, func() bool {
		var code int
		code, body = healthGet(t, h, "/metrics")
		return code == http.StatusOK && strings.Contains(body, "\nsagad_capsules_completed_total 1\n")
	}, 10*time.Second, 20*time.Millisecond)
	for _, want := range []string{
		"\nsagad_capsules_received_total 1\n",
		`sagad_transitions_total{outcome="passed",phase="EXECUTION"} 1`,
		`sagad_capsules_in_phase{phase="RECEPTION"} 0`,
		`sagad_capsules_paused{trigger="operator_manual"} 0`,
		"\nsagad_build_info{",
		"\nsagad_jetstream_scrape_errors_total 0\n",
		"\ngo_goroutines ",
	} {
		require.Contains(t, body, want)
	}
}
