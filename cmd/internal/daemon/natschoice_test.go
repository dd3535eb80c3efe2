package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/capsuletest"
	lb "github.com/sagad/sagad/internal/loopback"
)

// TestSagactlsURLDoesNotMoveSagad is issue 35's stumble: SAGA_NATS_URL
// exported for sagactl (here naming a port nobody serves), then sagad started
// in that shell with --nats-listen. sagad starts its embedded server on the
// address given, says at WARN that the variable is ignored, and never waits
// for the other URL.
func TestSagactlsURLDoesNotMoveSagad(t *testing.T) {
	t.Parallel()
	ports, err := lb.FreePorts(2)
	require.NoError(t, err)
	env := envOf(map[string]string{"SAGA_NATS_URL": fmt.Sprintf("nats://127.0.0.1:%d", ports[0])})
	listen := fmt.Sprintf("127.0.0.1:%d", ports[1])
	cfg, err := parseConfig([]string{"--nats-listen", listen, "--data-dir", t.TempDir(), "--workspace", capsuletest.Workspace(t),
		"--http-listen", "off", "--log-level", "warn", "--shutdown-timeout", "10s"}, env, &bytes.Buffer{})
	require.NoError(t, err)
	require.Empty(t, cfg.URL)

	b := runBackground(t, cfg)
	b.waitReady(t, 30*time.Second)
	require.Contains(t, b.logs.String(), `level=WARN msg="SAGA_NATS_URL is set and ignored: it is sagactl's; sagad reads SAGAD_NATS_URL"`)
	require.NotContains(t, b.logs.String(), "waiting for NATS")
	require.NoError(t, b.stop(t))
}

// TestMainRefusesTwoServers: an outside URL and a listen address given
// together end sagad at once, exit 2, with one line naming both.
func TestMainRefusesTwoServers(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	began := time.Now()
	code := Main([]string{"--nats-url", "nats://127.0.0.1:1", "--nats-listen", "127.0.0.1:4333", "--http-listen", "off"}, &stdout, &stderr)
	require.Equal(t, 2, code, stderr.String())
	require.Less(t, time.Since(began), 2*time.Second, "at once")
	first, _, _ := strings.Cut(stderr.String(), "\n")
	require.Contains(t, first, "--nats-url nats://127.0.0.1:1 and --nats-listen 127.0.0.1:4333")
	require.Empty(t, stdout.String())
}

// TestChooseNATS: which of the two settings wins, by where each came from.
func TestChooseNATS(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name             string
		url, listen      string
		src              natsSources
		wantURL, wantLis string
		wantWarn         string
		wantErr          bool
	}{
		{name: "neither", wantURL: "", wantLis: ""},
		{name: "URL alone", url: "nats://a:4222", src: natsSources{url: "SAGAD_NATS_URL"}, wantURL: "nats://a:4222"},
		{name: "listen alone", listen: "127.0.0.1:1", src: natsSources{listen: "SAGAD_NATS_LISTEN"}, wantLis: "127.0.0.1:1"},
		{name: "both by env", url: "nats://a:4222", listen: "127.0.0.1:1", src: natsSources{url: "SAGAD_NATS_URL", listen: "SAGAD_NATS_LISTEN"}, wantErr: true},
		{name: "both by flag", url: "nats://a:4222", listen: "127.0.0.1:1", src: natsSources{urlFlag: true, listenFlag: true}, wantErr: true},
		{
			name: "listen flag over URL env", url: "nats://a:4222", listen: "127.0.0.1:1", src: natsSources{url: "SAGAD_NATS_URL", listenFlag: true},
			wantLis: "127.0.0.1:1", wantWarn: "the outside NATS URL from SAGAD_NATS_URL (nats://a:4222) is ignored",
		},
		{
			name: "URL flag over listen file", url: "nats://a:4222", listen: "127.0.0.1:1", src: natsSources{listen: "config file nats_listen", urlFlag: true},
			wantURL: "nats://a:4222", wantWarn: "listen address from config file nats_listen (127.0.0.1:1) is ignored",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{NATSListen: tt.listen}
			cfg.URL = tt.url
			warnings, err := chooseNATS(&cfg, tt.src)
			if tt.wantErr {
				require.ErrorIs(t, err, ErrNATSChoice)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantURL, cfg.URL)
			require.Equal(t, tt.wantLis, cfg.NATSListen)
			if tt.wantWarn == "" {
				require.Empty(t, warnings)
				return
			}
			require.Len(t, warnings, 1)
			require.Contains(t, warnings[0], tt.wantWarn)
		})
	}
}

// TestEnvWarnings: every SAGA_* variable sagad does not read is named with
// its SAGAD_* counterpart; the console's older names are read and flagged.
func TestEnvWarnings(t *testing.T) {
	t.Parallel()
	require.Empty(t, envWarnings(envOf(map[string]string{"SAGAD_NATS_URL": "nats://a:4222", "SAGA_UNRELATED": "x"})))
	w := envWarnings(envOf(map[string]string{"SAGA_NATS_CREDS": "/c", "SAGA_NATS_PASSWORD": "secret", "SAGA_UI_TOKEN": "t"}))
	require.Equal(t, []string{
		"SAGA_NATS_CREDS is set and ignored: it is sagactl's; sagad reads SAGAD_NATS_CREDS",
		"SAGA_NATS_PASSWORD is set and ignored: it is sagactl's; sagad reads SAGAD_NATS_PASSWORD",
		"SAGA_UI_TOKEN is the older name of SAGAD_UI_TOKEN: read for now, rename it",
	}, w)
	for _, l := range w {
		require.NotContains(t, l, "secret", "a warning names variables, never their values")
	}
}

// TestJSONLogDurations: a duration in a JSON log line is "1.5s", as in a
// text line, not 1500000000 nanoseconds.
func TestJSONLogDurations(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	log := newLogger(Config{LogFormat: "json", LogLevel: "info"}, &b)
	log.Info("shutting down", "timeout", 1500*time.Millisecond, "group", slogGroup())
	var line map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &line))
	require.Equal(t, "1.5s", line["timeout"])
	require.Equal(t, map[string]any{"wait": "2m0s", "n": float64(3)}, line["group"])
}

func slogGroup() slog.Value {
	return slog.GroupValue(slog.Duration("wait", 2*time.Minute), slog.Int("n", 3))
}
