package daemon

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestProbeAddr(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"127.0.0.1:9464", "127.0.0.1:9464"},
		{"0.0.0.0:9464", "127.0.0.1:9464"},
		{":9464", "127.0.0.1:9464"},
		{"[::]:9464", "[::1]:9464"},
		{"[::1]:9464", "[::1]:9464"},
		{"10.1.2.3:80", "10.1.2.3:80"},
		{"localhost:9464", "localhost:9464"},
		{"no-port", "no-port"},
	} {
		require.Equal(t, tt.want, probeAddr(tt.in), tt.in)
	}
}

// runHealthcheck runs `sagad healthcheck args...` through Main's dispatch
// with env as the environment.
func runHealthcheck(env map[string]string, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := healthcheck(args, envOf(env), &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestHealthcheckReady: the probe finds a running sagad's listener from the
// same flags or environment sagad was given, a wildcard address included.
func TestHealthcheckReady(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, t.TempDir())
	cfg.HTTPListen = freeAddr(t)
	start(t, cfg)
	_, port, err := net.SplitHostPort(cfg.HTTPListen)
	require.NoError(t, err)

	code, out, errOut := runHealthcheck(nil, "--http-listen", cfg.HTTPListen)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "ready\n", out)

	code, out, errOut = runHealthcheck(map[string]string{"SAGAD_HTTP_LISTEN": "0.0.0.0:" + port, "SAGAD_INSECURE": "true", "SAGAD_NO_UI": "true"})
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "ready\n", out)
}

func TestHealthcheckFailures(t *testing.T) {
	t.Parallel()
	notReady := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not ready: jetstream writes failing for 42s (storage)", http.StatusServiceUnavailable)
	}))
	t.Cleanup(notReady.Close)
	nobody := freeAddr(t) // nothing listens there

	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"not ready", []string{"--http-listen", strings.TrimPrefix(notReady.URL, "http://")},
			"503 Service Unavailable: not ready: jetstream writes failing for 42s (storage)"},
		{"nothing listening", []string{"--http-listen", nobody}, "connection refused"},
		{"listener off", []string{"--http-listen", "off"}, "the HTTP listener is off (--http-listen off): nothing to probe"},
		{"bad flag", []string{"--no-such-flag"}, "unknown flag: --no-such-flag"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runHealthcheck(nil, tt.args...)
			require.Equal(t, 1, code, "Docker's HEALTHCHECK knows 0 and 1 only")
			require.Empty(t, out)
			require.Contains(t, errOut, tt.want)
		})
	}
}

// TestMainDispatchesHealthcheck: `sagad healthcheck` is the probe, not a
// sagad refusing an unexpected argument.
func TestMainDispatchesHealthcheck(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	require.Equal(t, 1, Main([]string{HealthcheckCommand, "--http-listen", "off"}, &out, &errOut))
	require.Contains(t, errOut.String(), "sagad healthcheck: the HTTP listener is off")
}

// deployMetricNames are the sagad metrics deploy/prometheus/alerts.yml and
// the Grafana dashboard query.
func deployMetricNames(t *testing.T) map[string][]string {
	t.Helper()
	name := regexp.MustCompile(`\bsagad_[a-z_]+`)
	used := map[string][]string{}
	for _, f := range []string{"../../../deploy/prometheus/alerts.yml", "../../../deploy/grafana/sagad-dashboard.json"} {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, n := range name.FindAllString(string(b), -1) {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				n = strings.TrimSuffix(n, suffix)
			}
			used[n] = append(used[n], f)
		}
	}
	return used
}

// TestDeployMetricsOnRealScrape: every metric the alert rules and the
// dashboard use is on a running sagad's /metrics (before any capsule: the
// rules must not depend on a series that appears only later).
func TestDeployMetricsOnRealScrape(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, t.TempDir())
	cfg.HTTPListen = freeAddr(t)
	start(t, cfg)
	body := scrape(t, "http://"+cfg.HTTPListen+"/metrics")
	have := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if n, ok := strings.CutPrefix(line, "# TYPE "); ok {
			have[strings.Fields(n)[0]] = true
		}
	}
	used := deployMetricNames(t)
	require.Contains(t, used, "sagad_jetstream_writes_failing")
	require.Contains(t, used, "sagad_capsules_rescued_total")
	for n, files := range used {
		if strings.HasSuffix(n, "_") {
			continue // a prefix in a comment, such as sagad_consumer_*
		}
		require.True(t, have[n], "%s uses %s, which a running sagad does not expose", files[0], n)
	}
}
