package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	lb "github.com/sagad/sagad/internal/loopback"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/store"
)

// background is one Run whose start the test watches.
type background struct {
	logs   *logBuffer
	ready  chan string
	done   chan error
	cancel context.CancelFunc
}

// runBackground starts Run with cfg and returns at once; Run is stopped
// when the test ends.
func runBackground(t *testing.T, cfg Config) *background {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := &background{logs: &logBuffer{t: t}, ready: make(chan string, 1), done: make(chan error, 1), cancel: cancel}
	go func() { b.done <- Run(ctx, cfg, b.logs, func(url string) { b.ready <- url }) }()
	t.Cleanup(func() { b.stop(t) })
	return b
}

// waitReady waits until Run is ready, failing the test if it returned.
func (b *background) waitReady(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case <-b.ready:
	case err := <-b.done:
		b.done <- err
		t.Fatalf("Run returned before ready: %v", err)
	case <-time.After(within):
		t.Fatalf("sagad not ready within %s", within)
	}
}

// stop cancels Run and returns what it returned (nil once returned before).
func (b *background) stop(t *testing.T) error {
	t.Helper()
	b.cancel()
	select {
	case err := <-b.done:
		b.done <- nil
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of cancellation")
		return nil
	}
}

// getPath GETs http://addr+path and returns the status and body; a
// connection error is status 0.
func getPath(addr, path string) (int, string) {
	hc := &http.Client{Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitReadyz waits until /readyz answers code with a body containing want.
func waitReadyz(t *testing.T, addr string, code int, want string) string {
	t.Helper()
	var last string
	natstest.Eventually(t, 90*time.Second, 50*time.Millisecond, func() bool {
		c, body := getPath(addr, "/readyz")
		last = fmt.Sprint(c, " ", body)
		return c == code && strings.Contains(body, want)
	}, "/readyz: want %d %q", code, want, stringer(func() string { return last }))
	return last
}

type stringer func() string

func (f stringer) String() string { return f() }

// TestStartWaitsForLateServer: sagad started before its NATS waits, says
// why on /readyz (and in one INFO line, however many attempts), and serves
// once the server comes up.
func TestStartWaitsForLateServer(t *testing.T) {
	t.Parallel()
	ports, err := lb.FreePorts(1)
	require.NoError(t, err)
	cfg := testConfig(t, t.TempDir())
	cfg.URL = fmt.Sprintf("nats://127.0.0.1:%d", ports[0])
	cfg.HTTPListen = freeAddr(t)
	cfg.LogLevel = "debug"
	b := runBackground(t, cfg)

	waitReadyz(t, cfg.HTTPListen, http.StatusServiceUnavailable, "not ready: starting: NATS: no NATS server answers")
	code, body := getPath(cfg.HTTPListen, "/healthz")
	require.Equal(t, http.StatusOK, code, "alive while waiting: %s", body)
	// Five attempts failed before the server comes: the backoff has
	// reached its cap (with the old 30 s cap it would be at 16 s).
	natstest.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool {
		return strings.Count(b.logs.String(), `level=DEBUG msg="waiting for NATS"`) >= 4
	}, "five attempts")

	natstest.RunServerWith(t, func(o *server.Options) { o.Port = ports[0] })
	// Issue 35: ready within 5 s of its server being able to serve.
	b.waitReady(t, 5*time.Second)
	waitReadyz(t, cfg.HTTPListen, http.StatusOK, "ready")
	require.Equal(t, 1, strings.Count(b.logs.String(), `level=INFO msg="waiting for NATS"`), "one INFO line per cause")
	require.Contains(t, b.logs.String(), `msg="waited for NATS: done"`)
	require.NoError(t, b.stop(t))
}

// TestStartBackoffCapped: the wait between start attempts grows from
// startRetryMin and never passes one second, whatever the number of
// attempts, so a server that comes late is used within a second.
func TestStartBackoffCapped(t *testing.T) {
	t.Parallel()
	delay, total := startRetryMin, startRetryMin
	want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, time.Second}
	for i := 0; i < 100; i++ {
		if i < len(want) {
			require.Equal(t, want[i], delay, "attempt %d", i)
		}
		require.LessOrEqual(t, delay, time.Second, "attempt %d", i)
		delay = nextStartDelay(delay)
		total += delay
	}
	require.Greater(t, total, 90*time.Second, "the backoff does not shrink")
}

// TestStartTimeoutExits: with --start-timeout, a NATS that never comes
// ends the start with one ERROR line naming the last cause.
func TestStartTimeoutExits(t *testing.T) {
	t.Parallel()
	ports, err := lb.FreePorts(1)
	require.NoError(t, err)
	cfg := testConfig(t, t.TempDir())
	cfg.URL = fmt.Sprintf("nats://127.0.0.1:%d", ports[0])
	cfg.StartTimeout = Duration(2 * time.Second)
	logs := &logBuffer{t: t}
	began := time.Now()
	err = Run(context.Background(), cfg, logs, func(string) { t.Error("ready without a server") })
	require.ErrorIs(t, err, errStartTimeout)
	require.ErrorContains(t, err, "no servers available for connection")
	require.Less(t, time.Since(began), 20*time.Second)
	require.Equal(t, 1, strings.Count(logs.String(), "level=ERROR"), logs.String())
	require.Contains(t, logs.String(), `level=ERROR msg="sagad did not start within --start-timeout" start_timeout=2s last_cause=`)

	// Asked to stop while waiting is a clean shutdown, not a failure.
	cfg.StartTimeout = 0
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	require.NoError(t, Run(ctx, cfg, io.Discard, nil))
}

// TestStartFailureKinds: what sagad waits out and what it exits on.
func TestStartFailureKinds(t *testing.T) {
	t.Parallel()
	apiErr := func(code jetstream.ErrorCode) error {
		return fmt.Errorf("stream SAGA_INTAKE: %w", &jetstream.APIError{ErrorCode: code, Description: "x"})
	}
	for _, tt := range []struct {
		err  error
		wait bool
	}{
		{nats.ErrNoServers, true},
		{apiErr(10005), true}, // no suitable peers for placement
		{apiErr(10023), true}, // insufficient resources
		{apiErr(10008), true}, // JetStream temporarily unavailable
		{fmt.Errorf("pipeline: %w", context.DeadlineExceeded), true},
		{jetstream.ErrJetStreamNotEnabled, true},
		{nats.ErrAuthorization, false},
		{errors.New("nats: Authorization Violation"), false},
		{jetstream.ErrJetStreamNotEnabledForAccount, false},
		{apiErr(10074), false}, // replicas > 1 not supported in non-clustered mode
		{apiErr(10058), false}, // stream name in use
		{&store.DriftError{}, false},
		{errors.New("pipeline: config: workers must not be negative"), false},
		{&net.OpError{Op: "read", Err: timeoutErr{}}, true},
	} {
		class, wait := startFailure(tt.err)
		require.Equal(t, tt.wait, wait, "%v (%s)", tt.err, class)
		if wait {
			require.NotEmpty(t, class, "%v", tt.err)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// sagadStreams returns the replicas of every stream on the cluster.
func sagadStreams(t *testing.T, url string) map[string]int {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]int{}
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		out[info.Config.Name] = info.Config.Replicas
	}
	require.NoError(t, l.Err())
	return out
}

// TestStartOnFormingClusterThenReplicas: sagad started on a 3-node cluster
// with one node up waits (/readyz 503 with the reason) and serves once the
// others join. A second sagad asking for 1 replica refuses and changes
// nothing, also when its HTTP port is taken; with --migrate it changes
// them.
func TestStartOnFormingClusterThenReplicas(t *testing.T) {
	t.Parallel()
	c := natstest.FormingCluster(t, 3, 1)
	cfg := testConfig(t, t.TempDir())
	cfg.URL = c.URLs(0)
	cfg.Replicas = 3
	cfg.HTTPListen = freeAddr(t)
	cfg.LogLevel = "debug"
	b := runBackground(t, cfg)
	waitReadyz(t, cfg.HTTPListen, http.StatusServiceUnavailable, "not ready: starting: JetStream topology: ")
	c.Start(1, 2)
	b.waitReady(t, 120*time.Second)
	waitReadyz(t, cfg.HTTPListen, http.StatusOK, "ready")
	require.Contains(t, b.logs.String(), `level=INFO msg="waiting for JetStream topology"`)
	require.NoError(t, b.stop(t))

	r3 := sagadStreams(t, c.URL(0))
	require.Contains(t, r3, store.IntakeStream)
	for name, r := range r3 {
		require.Equal(t, 3, r, name)
	}

	// A port in use ends the start before anything in NATS changes, even
	// with --migrate.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	one := testConfig(t, t.TempDir())
	one.URL = c.URLs(1)
	one.HTTPListen = ln.Addr().String()
	one.Migrate = true
	require.ErrorContains(t, Run(context.Background(), one, tlogWriter{t}, nil), "http listen: ")
	require.Equal(t, r3, sagadStreams(t, c.URL(0)), "nothing changed")

	one.HTTPListen, one.Migrate = "", false
	err = Run(context.Background(), one, tlogWriter{t}, func(string) { t.Error("a sagad asking for 1 replica started") })
	var drift *store.DriftError
	require.ErrorAs(t, err, &drift)
	require.ErrorContains(t, err, "stream SAGA_INTAKE: replicas 3, asked 1 (start with --replicas 3, or --migrate to change it)")
	require.ErrorContains(t, err, "bucket SAGA_CHECKPOINTS: replicas 3, asked 1 (start with --replicas 3")
	require.Len(t, drift.Changes, len(r3), "one change per stream and bucket: %v", err)
	require.Equal(t, r3, sagadStreams(t, c.URL(0)), "nothing changed")

	one.Migrate = true
	logs := &logBuffer{t: t}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, Run(ctx, one, logs, func(string) { cancel() }))
	require.Contains(t, logs.String(), `level=WARN msg="topology changed (--migrate)" kind=stream name=SAGA_INTAKE setting=replicas from=3 to=1`)
	for name, r := range sagadStreams(t, c.URL(0)) {
		require.Equal(t, 1, r, name)
	}
}

// TestMainRefusesDrift: a sagad asking for another retention than the
// streams were made with exits 2, a configuration error, naming the flag
// that matches.
func TestMainRefusesDrift(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := store.Ensure(ctx, js, store.Topology{Retention: time.Hour})
	require.NoError(t, err)
	var stderr strings.Builder
	code := Main([]string{"--nats-url", s.ClientURL(), "--http-listen", "off", "--workspace", t.TempDir(), "--log-level", "warn",
		"--retention", "2h"}, io.Discard, &stderr)
	require.Equal(t, 2, code, stderr.String())
	require.Contains(t, stderr.String(), "stream SAGA_EVENTS: max age 1h0m0s, asked 2h0m0s (start with --retention 1h0m0s, or --migrate to change it)")
	events, err := js.Stream(ctx, store.EventsStream)
	require.NoError(t, err)
	require.Equal(t, time.Hour, events.CachedInfo().Config.MaxAge, "nothing changed")
}

func TestParseStartConfig(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig([]string{"--migrate", "--start-timeout", "5m"}, envOf(nil), io.Discard)
	require.NoError(t, err)
	require.True(t, cfg.Migrate)
	require.Equal(t, Duration(5*time.Minute), cfg.StartTimeout)

	cfg, err = parseConfig(nil, envOf(map[string]string{"SAGAD_MIGRATE": "true", "SAGAD_START_TIMEOUT": "1m"}), io.Discard)
	require.NoError(t, err)
	require.True(t, cfg.Migrate)
	require.Equal(t, Duration(time.Minute), cfg.StartTimeout)

	file := writeConfig(t, `{"migrate": true, "start_timeout": "2m"}`)
	cfg, err = parseConfig([]string{"--config", file}, envOf(nil), io.Discard)
	require.NoError(t, err)
	require.True(t, cfg.Migrate)
	require.Equal(t, Duration(2*time.Minute), cfg.StartTimeout)

	cfg, err = parseConfig([]string{"--config", file, "--migrate=false"}, envOf(nil), io.Discard)
	require.NoError(t, err)
	require.False(t, cfg.Migrate, "the flag wins")
	require.Equal(t, Duration(0), defaults().StartTimeout, "waits as long as it takes by default")

	_, err = parseConfig([]string{"--start-timeout", "-1s"}, envOf(nil), io.Discard)
	require.ErrorContains(t, err, "start timeout must not be negative")
}
