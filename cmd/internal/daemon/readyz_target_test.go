package daemon

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// TestReadyzWhileOneStreamRefusesWrites: PLANNING's stream reaches its store
// limit while every other stream and bucket takes sagad's writes (what the
// fault run saw: nats-server refused writes on a few streams only). Within
// --unhealthy-after one ERROR line names the stream and the cause, the gauge
// is 1 and /readyz answers 503; with room again, all three recover by
// themselves and the capsule completes.
func TestReadyzWhileOneStreamRefusesWrites(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)
	logs := &syncLog{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	reg, m, err := newRegistry(js, log)
	require.NoError(t, err)
	const window = 500 * time.Millisecond
	mon := newMonitor(Config{UnhealthyAfter: Duration(window), StallAfter: Duration(time.Hour)}, log, m)
	t.Cleanup(mon.Stop)
	ctx := context.Background()
	p, err := pipeline.New(ctx, js, pipeline.Config{
		Logger: log, Workspace: capsuletest.Workspace(t), Metrics: m, Health: mon,
		RetryDelay: 50 * time.Millisecond, WriteTimeout: 2 * time.Second,
	})
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	var ready atomic.Bool
	ready.Store(true)
	h := httpHandler(nc, js, reg, &ready, mon)
	cl, err := client.NewClient(ctx, js)
	require.NoError(t, err)

	planning, err := js.Stream(ctx, store.PhaseStream(capsule.Planning))
	require.NoError(t, err)
	orig := planning.CachedInfo().Config
	full := orig
	full.MaxBytes, full.Discard = 1, jetstream.DiscardNew
	_, err = js.UpdateStream(ctx, full)
	require.NoError(t, err)

	doc := capsuletest.New()
	_, err = cl.Publish(ctx, doc.Sealed(t), "")
	require.NoError(t, err)
	start := time.Now()
	natstest.Eventually(t, 15*time.Second, 20*time.Millisecond, func() bool {
		code, _ := healthGet(t, h, "/readyz")
		return code == http.StatusServiceUnavailable
	}, "/readyz never failed while PLANNING refused every write")
	require.Less(t, time.Since(start), window+5*time.Second)
	code, body := healthGet(t, h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "jetstream writes failing: "+store.PhaseStream(capsule.Planning)+" for ")
	require.Contains(t, body, "store limit")
	_, metricsBody := healthGet(t, h, "/metrics")
	require.Contains(t, metricsBody, "\nsagad_jetstream_writes_failing 1\n")
	errorLines := func() []string {
		var out []string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "level=ERROR") {
				out = append(out, l)
			}
		}
		return out
	}
	lines := errorLines()
	require.Len(t, lines, 1, logs.String())
	require.Contains(t, lines[0], "jetstream writes are failing")
	require.Contains(t, lines[0], "target="+store.PhaseStream(capsule.Planning))
	require.Contains(t, lines[0], `cause="store limit"`)

	// Room again: sagad recovers without help and the capsule completes.
	_, err = js.UpdateStream(ctx, orig)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := cl.Wait(wctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.Completed, st.State, st.HaltReason)
	code, body = healthGet(t, h, "/readyz")
	require.Equal(t, http.StatusOK, code, body)
	_, metricsBody = healthGet(t, h, "/metrics")
	require.Contains(t, metricsBody, "\nsagad_jetstream_writes_failing 0\n")
	require.Len(t, errorLines(), 1, "the recovery is no ERROR line (it is INFO, below this test's level): %s", logs.String())
}

// syncLog is a log destination a test reads while sagad writes it.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
