package daemon

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/console"
)

func TestConsoleConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		file    string
		want    func(*Config)
		wantErr string
	}{
		{name: "on by default", want: func(*Config) {}},
		{name: "off by flag", args: []string{"--no-ui"}, want: func(c *Config) { c.NoUI = true }},
		{name: "off by env", env: map[string]string{"SAGAD_NO_UI": "true"}, want: func(c *Config) { c.NoUI = true }},
		{name: "off by file", file: `{"no_ui": true}`, want: func(c *Config) { c.NoUI = true }},
		{name: "bad env bool", env: map[string]string{"SAGAD_NO_UI": "maybe"}, wantErr: "SAGAD_NO_UI"},
		{name: "token by flag", args: []string{"--ui-token", tok("t1")}, want: func(c *Config) { c.UIToken = tok("t1") }},
		{name: "token by the older env name", env: map[string]string{"SAGA_UI_TOKEN": tok("t2")}, want: func(c *Config) { c.UIToken = tok("t2") }},
		{name: "sagad's env wins", env: map[string]string{"SAGA_UI_TOKEN": tok("t2"), "SAGAD_UI_TOKEN": tok("t3")}, want: func(c *Config) { c.UIToken = tok("t3") }},
		{name: "flag over env", args: []string{"--ui-token", tok("t1")}, env: map[string]string{"SAGA_UI_TOKEN": tok("t2")}, want: func(c *Config) { c.UIToken = tok("t1") }},
		{name: "token by file", file: `{"ui_token": "` + tok("t4") + `", "ui_basic_auth": "a:b"}`, want: func(c *Config) { c.UIToken, c.UIBasicAuth = tok("t4"), "a:b" }},
		{name: "basic by flag", args: []string{"--ui-basic-auth", "ops:pw"}, want: func(c *Config) { c.UIBasicAuth = "ops:pw" }},
		{name: "basic by env", env: map[string]string{"SAGA_UI_BASIC_AUTH": "ops:pw"}, want: func(c *Config) { c.UIBasicAuth = "ops:pw" }},
		{name: "basic without password", args: []string{"--ui-basic-auth", "ops"}, wantErr: "ui-basic-auth: want user:password"},
		{name: "basic without user", args: []string{"--ui-basic-auth", ":pw"}, wantErr: "ui-basic-auth: want user:password"},
		{name: "short token", args: []string{"--ui-token", "s3cret"}, wantErr: "ui-token: 6 bytes is short enough to guess; use at least 32"},
		{name: "off loopback without auth", args: []string{"--http-listen", "0.0.0.0:9464", "--insecure"}, wantErr: "set --ui-token"},
		{name: "off loopback with token", args: []string{"--http-listen", "0.0.0.0:9464", "--insecure", "--ui-token", tok("t")},
			want: func(c *Config) { c.HTTPListen, c.Insecure, c.UIToken = "0.0.0.0:9464", true, tok("t") }},
		{name: "off loopback with basic", args: []string{"--http-listen", "0.0.0.0:9464", "--insecure", "--ui-basic-auth", "a:b"},
			want: func(c *Config) { c.HTTPListen, c.Insecure, c.UIBasicAuth = "0.0.0.0:9464", true, "a:b" }},
		{name: "off loopback without console", args: []string{"--http-listen", "0.0.0.0:9464", "--insecure", "--no-ui"},
			want: func(c *Config) { c.HTTPListen, c.Insecure, c.NoUI = "0.0.0.0:9464", true, true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.file != "" {
				args = append([]string{"--config", writeConfig(t, tt.file)}, args...)
			}
			cfg, err := parseConfig(args, envOf(tt.env), io.Discard)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				if tt.name == "off loopback without auth" {
					require.ErrorIs(t, err, ErrConsoleAuth)
				}
				return
			}
			require.NoError(t, err)
			cfg.warnings = nil // the older names' warnings: TestEnvWarnings
			want := defaults()
			tt.want(&want)
			require.Equal(t, want, cfg)
		})
	}
	// Run refuses too, before starting anything.
	cfg := testConfig(t, t.TempDir())
	cfg.HTTPListen, cfg.Insecure = "0.0.0.0:0", true
	require.ErrorIs(t, Run(context.Background(), cfg, io.Discard, nil), ErrConsoleAuth)
}

// TestConsoleServed: sagad serves the console at /ui/ (and / leads there)
// beside the metrics, asks for the token when one is set, and serves no
// console with --no-ui.
func TestConsoleServed(t *testing.T) {
	t.Parallel()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(url string, hdr ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, url, nil)
		require.NoError(t, err)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	cfg := testConfig(t, t.TempDir())
	cfg.HTTPListen = freeAddr(t)
	cfg.UIToken = tok("s3cret")
	d := start(t, cfg)
	base := "http://" + cfg.HTTPListen
	code, _ := get(base + "/")
	require.Equal(t, http.StatusFound, code)
	code, _ = get(base + "/ui/")
	require.Equal(t, http.StatusUnauthorized, code)
	code, body := get(base+"/ui/", "Authorization", "Bearer "+tok("s3cret"))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "sagad console")
	code, _ = get(base+"/ui/api/inbox", "Authorization", "Bearer "+tok("s3cret"))
	require.Equal(t, http.StatusOK, code)
	code, _ = get(base + "/healthz")
	require.Equal(t, http.StatusOK, code, "the token guards the console only")

	// An open event stream does not hold sagad's shutdown.
	req, err := http.NewRequest(http.MethodGet, base+"/ui/api/stream", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok("s3cret"))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	hello := make([]byte, 64)
	n, err := resp.Body.Read(hello)
	require.NoError(t, err)
	require.Contains(t, string(hello[:n]), "event: hello")
	begun := time.Now()
	require.NoError(t, d.stop(t))
	require.Less(t, time.Since(begun), 8*time.Second, "shutdown waited for the stream")
	_, err = io.ReadAll(resp.Body)
	require.NoError(t, err, "the stream ended cleanly")

	cfg = testConfig(t, t.TempDir())
	cfg.HTTPListen = freeAddr(t)
	cfg.NoUI = true
	start(t, cfg)
	code, _ = get("http://" + cfg.HTTPListen + "/ui/")
	require.Equal(t, http.StatusNotFound, code)
	code, _ = get("http://" + cfg.HTTPListen + "/metrics")
	require.Equal(t, http.StatusOK, code)
}

// tok pads s to a token long enough for the console.
func tok(s string) string { return s + strings.Repeat("-", console.MinTokenLen) }
