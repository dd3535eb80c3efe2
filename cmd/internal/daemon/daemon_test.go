package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natsconn"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats.go's ObjectStore.Put (artifacts) starts this goroutine and can
		// clear its status channel before the goroutine reads it, which then
		// blocks on a nil channel forever: an upstream race, not ours.
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
	)
}

// defaults is the configuration with nothing set.
func defaults() Config {
	return Config{
		NATSListen:      "127.0.0.1:4222",
		DataDir:         "data",
		Workspace:       ".",
		HTTPListen:      "127.0.0.1:9464",
		LogFormat:       "text",
		LogLevel:        "info",
		ShutdownTimeout: Duration(30 * time.Second),
		Sync:            "1s",
		WriteTimeout:    Duration(5 * time.Second),
		UnhealthyAfter:  Duration(30 * time.Second),
		StallAfter:      Duration(2 * time.Minute),
	}
}

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeConfig(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sagad.json")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

// fileConfig sets every field the precedence tests look at.
const fileConfig = `{
  "workers": 3,
  "log_level": "debug",
  "data_dir": "/srv/file",
  "shutdown_timeout": "5s",
  "sync_always": true,
  "http_listen": "127.0.0.1:9100",
  "nats_url": "nats://file:4222"
}`

func TestParseConfigPrecedence(t *testing.T) {
	t.Parallel()
	fromFile := func(c *Config) {
		c.Workers = 3
		c.LogLevel = "debug"
		c.DataDir = "/srv/file"
		c.ShutdownTimeout = Duration(5 * time.Second)
		c.Sync = "always"
		c.HTTPListen = "127.0.0.1:9100"
		c.URL = "nats://file:4222"
	}
	envOverFile := map[string]string{
		"SAGAD_WORKERS":          "5",
		"SAGAD_LOG_LEVEL":        "warn",
		"SAGAD_DATA_DIR":         "/srv/env",
		"SAGAD_SHUTDOWN_TIMEOUT": "7s",
		"SAGAD_SYNC_ALWAYS":      "false",
	}
	tests := []struct {
		name string
		// file is a config file's content, passed with --config; "" for none.
		file string
		env  map[string]string
		args []string
		want func(*Config)
	}{
		{name: "defaults", want: func(*Config) {}},
		{name: "file over defaults", file: fileConfig, want: fromFile},
		{
			name: "env over file", file: fileConfig, env: envOverFile,
			want: func(c *Config) {
				fromFile(c)
				c.Workers = 5
				c.LogLevel = "warn"
				c.DataDir = "/srv/env"
				c.ShutdownTimeout = Duration(7 * time.Second)
				c.Sync = "1s"
			},
		},
		{
			name: "flag over env", file: fileConfig, env: envOverFile,
			args: []string{"--workers", "7", "--log-level", "error", "--data-dir", "/srv/flag", "--shutdown-timeout", "9s", "--sync-always"},
			want: func(c *Config) {
				fromFile(c)
				c.Workers = 7
				c.LogLevel = "error"
				c.DataDir = "/srv/flag"
				c.ShutdownTimeout = Duration(9 * time.Second)
				c.Sync = "always"
			},
		},
		{
			name: "a flag set to its zero value still wins",
			env:  map[string]string{"SAGAD_WORKERS": "5", "SAGAD_SYNC_ALWAYS": "true", "SAGAD_LOG_FORMAT": "json"},
			args: []string{"--workers", "0", "--sync-always=false", "--log-format", "text"},
			want: func(*Config) {},
		},
		{
			name: "env alone",
			env:  map[string]string{"SAGAD_NATS_URL": "nats://env:4222", "SAGAD_WORKSPACE": "/ws", "SAGAD_LOG_FORMAT": "json", "SAGAD_REPLICAS": "3"},
			want: func(c *Config) {
				c.URL = "nats://env:4222"
				c.Workspace = "/ws"
				c.LogFormat = "json"
				c.Replicas = 3
			},
		},
		{
			name: "empty env values do not override the file", file: fileConfig,
			env:  map[string]string{"SAGAD_WORKERS": "", "SAGAD_LOG_LEVEL": ""},
			want: fromFile,
		},
		{
			name: "flags alone",
			args: []string{"--nats-url", "nats://flag:4222", "--nats-creds", "/c.creds", "--replicas", "3"},
			want: func(c *Config) {
				c.URL = "nats://flag:4222"
				c.Creds = "/c.creds"
				c.Replicas = 3
			},
		},
		{
			name: "sagactl's SAGA_* connection settings are ignored, with a warning each",
			env: map[string]string{
				"SAGA_NATS_URL": "nats://sagactl:4222", "SAGA_NATS_USER": "u", "SAGA_TLS_CA": "/ca.pem",
			},
			want: func(c *Config) {
				c.warnings = []string{
					"SAGA_NATS_URL is set and ignored: it is sagactl's; sagad reads SAGAD_NATS_URL",
					"SAGA_NATS_USER is set and ignored: it is sagactl's; sagad reads SAGAD_NATS_USER",
					"SAGA_TLS_CA is set and ignored: it is sagactl's; sagad reads SAGAD_TLS_CA",
				}
			},
		},
		{
			name: "connection settings from SAGAD_*",
			env: map[string]string{
				"SAGAD_NATS_URL": "nats://own:4222", "SAGAD_NATS_USER": "u", "SAGAD_NATS_PASSWORD": "pw",
				"SAGAD_TLS_CA": "/ca.pem", "SAGAD_TLS_CERT": "/c.pem", "SAGAD_TLS_KEY": "/k.pem",
			},
			want: func(c *Config) {
				c.URL, c.User, c.Password = "nats://own:4222", "u", "pw"
				c.TLSCA, c.TLSCert, c.TLSKey = "/ca.pem", "/c.pem", "/k.pem"
			},
		},
		{
			name: "flags over SAGAD_ names",
			env:  map[string]string{"SAGAD_NATS_URL": "nats://env:4222", "SAGAD_NATS_CREDS": "/env.creds", "SAGAD_TLS_CA": "/env.pem"},
			args: []string{"--nats-creds", "/flag.creds", "--tls-ca", "/flag.pem"},
			want: func(c *Config) { c.URL, c.Creds, c.TLSCA = "nats://env:4222", "/flag.creds", "/flag.pem" },
		},
		{
			name: "connection settings by file", file: `{"nats_user":"u","nats_password_file":"/pw","tls_ca":"/ca.pem"}`,
			want: func(c *Config) { c.User, c.PasswordFile, c.TLSCA = "u", "/pw", "/ca.pem" },
		},
		{
			name: "--nats-url empty chooses the embedded server", env: map[string]string{"SAGAD_NATS_URL": "nats://env:4222"},
			args: []string{"--nats-url", ""}, want: func(*Config) {},
		},
		{
			name: "--nats-listen wins over an outside URL from the environment, with a warning",
			env:  map[string]string{"SAGAD_NATS_URL": "nats://u:secret@env:4222"}, args: []string{"--nats-listen", "127.0.0.1:4333"},
			want: func(c *Config) {
				c.NATSListen = "127.0.0.1:4333"
				c.warnings = []string{"--nats-listen given on the command line: starting the embedded server; the outside NATS URL from SAGAD_NATS_URL (nats://u:REDACTED@env:4222) is ignored"}
			},
		},
		{
			name: "--nats-listen wins over an outside URL from the file", file: `{"nats_url":"nats://file:4222"}`,
			args: []string{"--nats-listen", "127.0.0.1:4333"},
			want: func(c *Config) {
				c.NATSListen = "127.0.0.1:4333"
				c.warnings = []string{"--nats-listen given on the command line: starting the embedded server; the outside NATS URL from config file nats_url (nats://file:4222) is ignored"}
			},
		},
		{
			name: "--nats-url wins over a listen address from the environment, with a warning",
			env:  map[string]string{"SAGAD_NATS_LISTEN": "127.0.0.1:4333"}, args: []string{"--nats-url", "nats://flag:4222"},
			want: func(c *Config) {
				c.URL = "nats://flag:4222"
				c.warnings = []string{"--nats-url given on the command line: connecting to it; the embedded server's listen address from SAGAD_NATS_LISTEN (127.0.0.1:4333) is ignored"}
			},
		},
		{name: "sync by flag", args: []string{"--sync", "default"}, want: func(c *Config) { c.Sync = "default" }},
		{name: "sync by env over file", file: `{"sync":"100ms"}`, env: map[string]string{"SAGAD_SYNC": "always"}, want: func(c *Config) { c.Sync = "always" }},
		{name: "sync by file", file: `{"sync":"100ms"}`, want: func(c *Config) { c.Sync = "100ms" }},
		{name: "sync flag over the older sync_always", file: `{"sync_always":true}`, args: []string{"--sync", "1s"}, want: func(*Config) {}},
		{name: "sync_always false keeps another policy", env: map[string]string{"SAGAD_SYNC": "default"}, args: []string{"--sync-always=false"}, want: func(c *Config) { c.Sync = "default" }},
		{name: "http off by flag", args: []string{"--http-listen", "off"}, want: func(c *Config) { c.HTTPListen = "" }},
		{name: "http off by env", env: map[string]string{"SAGAD_HTTP_LISTEN": "off"}, want: func(c *Config) { c.HTTPListen = "" }},
		{name: "http off by file", file: `{"http_listen":"off"}`, want: func(c *Config) { c.HTTPListen = "" }},
		{
			name: "http flag over env off", env: map[string]string{"SAGAD_HTTP_LISTEN": "off"}, args: []string{"--http-listen", "127.0.0.1:9999"},
			want: func(c *Config) { c.HTTPListen = "127.0.0.1:9999" },
		},
		{name: "http off by flag over file", file: fileConfig, args: []string{"--http-listen", "off"}, want: func(c *Config) { fromFile(c); c.HTTPListen = "" }},
		{name: "retention by file", file: `{"retention":"24h"}`, want: func(c *Config) { c.Retention = Duration(24 * time.Hour) }},
		{name: "inline artifact bytes by file", file: `{"inline_artifact_bytes":1024}`, want: func(c *Config) { c.InlineArtifactBytes = 1024 }},
		{
			name: "inline artifact bytes flag over env", env: map[string]string{"SAGAD_INLINE_ARTIFACT_BYTES": "2048"}, args: []string{"--inline-artifact-bytes", "4096"},
			want: func(c *Config) { c.InlineArtifactBytes = 4096 },
		},
		{name: "inline artifact bytes by env", env: map[string]string{"SAGAD_INLINE_ARTIFACT_BYTES": "2048"}, want: func(c *Config) { c.InlineArtifactBytes = 2048 }},
		{
			name: "retention flag over env", env: map[string]string{"SAGAD_RETENTION": "1h"}, args: []string{"--retention", "-1s"},
			want: func(c *Config) { c.Retention = Duration(-time.Second) },
		},
		{
			name: "health settings by file", file: `{"write_timeout":"2s","unhealthy_after":"1m","stall_after":"10m"}`,
			want: func(c *Config) {
				c.WriteTimeout, c.UnhealthyAfter, c.StallAfter = Duration(2*time.Second), Duration(time.Minute), Duration(10*time.Minute)
			},
		},
		{
			name: "health settings: flags over env over file", file: `{"write_timeout":"2s","unhealthy_after":"1m","stall_after":"10m"}`,
			env:  map[string]string{"SAGAD_WRITE_TIMEOUT": "3s", "SAGAD_UNHEALTHY_AFTER": "45s", "SAGAD_STALL_AFTER": "5m"},
			args: []string{"--write-timeout", "1s", "--stall-after", "90s"},
			want: func(c *Config) {
				c.WriteTimeout, c.UnhealthyAfter, c.StallAfter = Duration(time.Second), Duration(45*time.Second), Duration(90*time.Second)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := tt.args
			if tt.file != "" {
				args = append([]string{"--config", writeConfig(t, tt.file)}, args...)
			}
			var stderr bytes.Buffer
			got, err := parseConfig(args, envOf(tt.env), &stderr)
			require.NoError(t, err)
			require.Empty(t, stderr.String())
			want := defaults()
			tt.want(&want)
			require.Equal(t, want, got)
		})
	}
}

func TestParseConfigFileLocation(t *testing.T) {
	t.Parallel()
	viaEnv := writeConfig(t, `{"workers": 11}`)
	viaFlag := writeConfig(t, `{"workers": 12}`)

	got, err := parseConfig(nil, envOf(map[string]string{"SAGAD_CONFIG": viaEnv}), io.Discard)
	require.NoError(t, err)
	require.Equal(t, 11, got.Workers)

	got, err = parseConfig([]string{"--config", viaFlag}, envOf(map[string]string{"SAGAD_CONFIG": viaEnv}), io.Discard)
	require.NoError(t, err)
	require.Equal(t, 12, got.Workers, "--config wins over SAGAD_CONFIG")
}

func TestParseConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		file    string
		env     map[string]string
		args    []string
		wantErr string
	}{
		{name: "unknown config file field", file: `{"wokers": 3}`, wantErr: `json: unknown field "wokers"`},
		{name: "config file not JSON", file: `workers = 3`, wantErr: "config file "},
		{name: "duration not a string", file: `{"shutdown_timeout": 30}`, wantErr: `duration must be a string like "30s"`},
		{name: "duration not a duration", file: `{"shutdown_timeout": "a while"}`, wantErr: `time: invalid duration "a while"`},
		{name: "bad log format by flag", args: []string{"--log-format", "xml"}, wantErr: `log format "xml": want text or json`},
		{name: "bad log format by env", env: map[string]string{"SAGAD_LOG_FORMAT": "logfmt"}, wantErr: `log format "logfmt": want text or json`},
		{name: "bad log format by file", file: `{"log_format": "yaml"}`, wantErr: `log format "yaml": want text or json`},
		{name: "bad child budget by flag", args: []string{"--child-budget", "queue"}, wantErr: `child budget "queue": want halt or wait`},
		{name: "bad child budget by env", env: map[string]string{"SAGAD_CHILD_BUDGET": "Wait"}, wantErr: `child budget "Wait": want halt or wait`},
		{name: "bad child budget by file", file: `{"child_budget": "retry"}`, wantErr: `child budget "retry": want halt or wait`},
		{name: "bad log level", args: []string{"--log-level", "verbose"}, wantErr: `log level "verbose": want debug, info, warn or error`},
		{name: "bad sync", args: []string{"--sync", "sometimes"}, wantErr: `sync "sometimes": want always, default or a positive duration`},
		{name: "no password in a config file", file: `{"nats_password": "x"}`, wantErr: `json: unknown field "nats_password"`},
		{name: "two ways to authenticate", env: map[string]string{"SAGAD_NATS_TOKEN": "t"}, args: []string{"--nats-creds", "/c"}, wantErr: "choose one way to authenticate"},
		{
			name: "outside URL and listen address both by flag", args: []string{"--nats-url", "nats://flag:4222", "--nats-listen", "127.0.0.1:4333"},
			wantErr: "both an outside NATS URL and an embedded server's listen address are given: --nats-url nats://flag:4222 and --nats-listen 127.0.0.1:4333",
		},
		{
			name: "outside URL and listen address both by env", env: map[string]string{"SAGAD_NATS_URL": "nats://u:pw@env:4222", "SAGAD_NATS_LISTEN": "127.0.0.1:4333"},
			wantErr: "are given: SAGAD_NATS_URL nats://u:REDACTED@env:4222 and SAGAD_NATS_LISTEN 127.0.0.1:4333: give one",
		},
		{
			name: "outside URL by env, listen address by file", file: `{"nats_listen":"127.0.0.1:4333"}`, env: map[string]string{"SAGAD_NATS_URL": "nats://env:4222"},
			wantErr: "are given: SAGAD_NATS_URL nats://env:4222 and config file nats_listen 127.0.0.1:4333",
		},
		{
			name: "outside URL and listen address both by file", file: `{"nats_url":"nats://file:4222","nats_listen":"127.0.0.1:4333"}`,
			wantErr: "are given: config file nats_url nats://file:4222 and config file nats_listen 127.0.0.1:4333",
		},
		{name: "negative workers", args: []string{"--workers", "-1"}, wantErr: "workers and replicas must not be negative"},
		{name: "bad SAGAD_WORKERS", env: map[string]string{"SAGAD_WORKERS": "many"}, wantErr: `SAGAD_WORKERS: strconv.ParseInt: parsing "many"`},
		{name: "bad SAGAD_SHUTDOWN_TIMEOUT", env: map[string]string{"SAGAD_SHUTDOWN_TIMEOUT": "soon"}, wantErr: "SAGAD_SHUTDOWN_TIMEOUT: "},
		{name: "negative write timeout", args: []string{"--write-timeout", "-1s"}, wantErr: "write timeout, unhealthy after and stall after must be positive"},
		{name: "bad SAGAD_STALL_AFTER", env: map[string]string{"SAGAD_STALL_AFTER": "later"}, wantErr: "SAGAD_STALL_AFTER: "},
		{name: "bad SAGAD_SYNC_ALWAYS", env: map[string]string{"SAGAD_SYNC_ALWAYS": "maybe"}, wantErr: "SAGAD_SYNC_ALWAYS: "},
		{name: "missing config file", args: []string{"--config", "/nonexistent/sagad.json"}, wantErr: "config file: open /nonexistent/sagad.json"},
		{name: "unexpected argument", args: []string{"extra"}, wantErr: "unexpected arguments: extra"},
		{name: "unknown flag", args: []string{"--frobnicate"}, wantErr: "unknown flag: --frobnicate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := tt.args
			if tt.file != "" {
				args = append([]string{"--config", writeConfig(t, tt.file)}, args...)
			}
			_, err := parseConfig(args, envOf(tt.env), io.Discard)
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

// TestParseConfigTrailingData: a config file holding more than one JSON value
// (a bad merge, two files concatenated) is read up to its first value and the
// rest silently ignored.
func TestParseConfigTrailingData(t *testing.T) {
	t.Parallel()
	p := writeConfig(t, `{"workers": 3} {"workers": 4, "log_level": "debug"}`)
	_, err := parseConfig([]string{"--config", p}, envOf(nil), io.Discard)
	require.Error(t, err)
}

func TestMainExitCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{"help", []string{"-h"}, 0, "  sagad [flags]  "},
		{"version", []string{"--version"}, 0, ""},
		{"bad flag value", []string{"--log-format", "xml"}, 2, `sagad: log format "xml": want text or json`},
		{"unknown flag", []string{"--frobnicate"}, 2, "unknown flag: --frobnicate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			require.Equal(t, tt.wantCode, Main(tt.args, &stdout, &stderr))
			require.Contains(t, stderr.String(), tt.wantStderr)
			if tt.name == "version" {
				require.Empty(t, stderr.String())
				require.Regexp(t, `^sagad \S+ \(rev [^;]+; go\S+\)\n$`, stdout.String())
				return
			}
			require.Empty(t, stdout.String())
		})
	}
}

// TestUsageErrorFirst: a bad flag or argument is one line of error and one
// pointing at -h, not the error lost above sixty lines of usage.
func TestUsageErrorFirst(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"--bogus"}, "sagad: unknown flag: --bogus\nRun 'sagad --help' for the flags.\n", 2},
		{[]string{"extra"}, "sagad: unexpected arguments: extra\nRun 'sagad --help' for the flags.\n", 2},
		{[]string{HealthcheckCommand, "--bogus"}, "sagad healthcheck: unknown flag: --bogus\nRun 'sagad healthcheck --help' for the flags.\n", 1},
		{[]string{NATSConfigCommand, "--bogus"}, "sagad nats-config: unknown flag: --bogus\nRun 'sagad nats-config --help' for the flags.\n", 2},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			require.Equal(t, tt.code, Main(tt.args, &stdout, &stderr))
			require.Equal(t, tt.want, stderr.String())
			require.Empty(t, stdout.String())
		})
	}
}

func TestParseConfigHelp(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	_, err := parseConfig([]string{"-h"}, envOf(nil), &stderr)
	require.ErrorIs(t, err, errHelp)
	for _, f := range []string{"config", "nats-url", "nats-listen", "data-dir", "workspace", "http-listen", "log-format", "log-level", "workers", "replicas", "shutdown-timeout", "sync", "sync-always", "nats-creds", "nats-nkey", "nats-user", "nats-password-file", "nats-token-file", "tls-ca", "tls-cert", "tls-key"} {
		require.Regexp(t, `(?m)^      --`+f+`( \w+)?  `, stderr.String())
	}
}

// TestEveryFlagHasItsVariable: each setting's flag names its SAGAD_*
// variable in the help, and that variable sets it (issue 35: one rule for
// every name, read by one loop).
func TestEveryFlagHasItsVariable(t *testing.T) {
	t.Parallel()
	var cfg Config
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	bindSettings(fs, &cfg)
	n := 0
	fs.VisitAll(func(f *pflag.Flag) {
		n++
		name := envName(f.Name)
		require.Contains(t, f.Usage, "env "+name+")", "--%s", f.Name)
		value := map[string]string{"bool": "true", "int": "7", "int32": "7", "int64": "7", "float64": "0.5", "duration": "7s"}[f.Value.Type()]
		if value == "" {
			value = "127.0.0.1:7"
		}
		if f.Name == "sync" {
			value = "always"
		}
		got, err := parseConfig(nil, envOf(map[string]string{name: value}), io.Discard)
		if err != nil {
			return // a value this setting refuses: it was read
		}
		got.warnings = nil
		require.NotEqual(t, defaults(), got, "%s=%s changed nothing", name, value)
	})
	require.Greater(t, n, 40)
}

// TestSingleDashFlags: -name, as Go's flag package took it before sagad's
// flags moved to pflag, still works.
func TestSingleDashFlags(t *testing.T) {
	t.Parallel()
	got, err := parseConfig([]string{"-workers", "9", "-log-level=debug"}, envOf(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, 9, got.Workers)
	require.Equal(t, "debug", got.LogLevel)
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.Int("ab", 0, "")
	fs.Int("cd", 0, "")
	require.Equal(t, []string{"--ab", "-1s", "-b", "--", "-cd"}, longFlags(fs, []string{"-ab", "-1s", "-b", "--", "-cd"}),
		"not a value, not a shorthand, not past --")
}

func TestDurationJSON(t *testing.T) {
	t.Parallel()
	var c struct {
		D Duration `json:"d"`
	}
	require.NoError(t, json.Unmarshal([]byte(`{"d":"1m30s"}`), &c))
	require.Equal(t, Duration(90*time.Second), c.D)
}

type tlogWriter struct{ t testing.TB }

func (w tlogWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// daemon is one Run in the background.
type daemon struct {
	url    string
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// stop cancels Run and returns what it returned.
func (d *daemon) stop(t *testing.T) error {
	t.Helper()
	d.once.Do(func() {
		d.cancel()
		select {
		case d.err = <-d.done:
		case <-time.After(30 * time.Second):
			d.err = errors.New("Run did not return within 30s of cancellation")
		}
	})
	return d.err
}

// start runs sagad with cfg until the test ends and returns once it is ready.
func start(t *testing.T, cfg Config) *daemon {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{cancel: cancel, done: make(chan error, 1)}
	ready := make(chan string, 1)
	go func() { d.done <- Run(ctx, cfg, tlogWriter{t}, func(url string) { ready <- url }) }()
	t.Cleanup(func() { _ = d.stop(t) })
	select {
	case d.url = <-ready:
	case err := <-d.done:
		d.done <- err
		t.Fatalf("Run returned before ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("sagad not ready within 30s")
	}
	return d
}

// testConfig is sagad on a random NATS port with its own data dir and
// workspace, HTTP off.
func testConfig(t *testing.T, dataDir string) Config {
	t.Helper()
	cfg, err := parseConfig([]string{
		"--nats-listen", "127.0.0.1:-1",
		"--data-dir", dataDir,
		"--workspace", capsuletest.Workspace(t),
		"--http-listen", "off",
		"--log-level", "warn",
		"--shutdown-timeout", "10s",
	}, envOf(nil), io.Discard)
	require.NoError(t, err)
	require.Empty(t, cfg.HTTPListen)
	return cfg
}

// connect joins sagad's embedded server as sagad, with the seed sagad
// wrote into dataDir: the client package reads JetStream, which only
// sagad's account has (the operator reads through the admin service).
func connect(t *testing.T, url, dataDir string) (*nats.Conn, *client.Client) {
	t.Helper()
	nc, err := natsconn.Options{URL: url, NKey: filepath.Join(CredsDir(dataDir), RoleSagad+natsconn.SeedExt)}.Connect()
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	client, err := client.NewClient(context.Background(), js)
	require.NoError(t, err)
	return nc, client
}

func TestRunCompletesCapsule(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	cfg := testConfig(t, dataDir)
	d := start(t, cfg)
	require.True(t, strings.HasPrefix(d.url, "nats://127.0.0.1:"), d.url)
	require.NotEqual(t, "nats://127.0.0.1:4222", d.url, "a random port was asked for")

	nc, client := connect(t, d.url, dataDir)
	doc := capsuletest.New()
	_, err := client.Publish(context.Background(), doc.Sealed(t), "trace-daemon-test")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := client.Wait(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)
	require.Equal(t, "trace-daemon-test", s.TraceID)
	nc.Close()

	require.NoError(t, d.stop(t))
	require.DirExists(t, filepath.Join(dataDir, "jetstream"))

	// Everything durable is in the data directory: a restart finds it.
	d2 := start(t, cfg)
	_, client2 := connect(t, d2.url, dataDir)
	s, err = client2.Status(context.Background(), doc.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.Completed, s.State)
	require.Len(t, s.History, 7)
	require.NoError(t, d2.stop(t))
}

// freeAddr returns a loopback address nobody listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func TestRunHTTP(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, t.TempDir())
	cfg.HTTPListen = freeAddr(t)
	d := start(t, cfg)

	hc := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	get := func(path string) (int, string) {
		resp, err := hc.Get("http://" + cfg.HTTPListen + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	tests := []struct {
		path     string
		wantCode int
		want     string
	}{
		{"/healthz", http.StatusOK, "ok\n"},
		{"/readyz", http.StatusOK, "ready\n"},
		{"/nope", http.StatusNotFound, "404 page not found\n"},
	}
	for _, tt := range tests {
		code, body := get(tt.path)
		require.Equal(t, tt.wantCode, code, tt.path)
		require.Equal(t, tt.want, body, tt.path)
	}
	code, body := get("/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "\ngo_goroutines ")
	require.Contains(t, body, "\nprocess_start_time_seconds ")

	resp, err := hc.Post("http://"+cfg.HTTPListen+"/healthz", "text/plain", nil)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)

	require.NoError(t, d.stop(t))
	hc.CloseIdleConnections()
	_, err = hc.Get("http://" + cfg.HTTPListen + "/healthz")
	require.Error(t, err, "the listener is closed after shutdown")
}

func TestRunStartFailures(t *testing.T) {
	t.Parallel()

	t.Run("http address in use", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { _ = ln.Close() })
		cfg := testConfig(t, t.TempDir())
		cfg.HTTPListen = ln.Addr().String()
		called := false
		err = Run(context.Background(), cfg, tlogWriter{t}, func(string) { called = true })
		require.ErrorContains(t, err, "http listen: ")
		require.False(t, called, "not ready when the listener failed")
	})

	t.Run("bad nats listen address", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig(t, t.TempDir())
		cfg.NATSListen = "localhost"
		err := Run(context.Background(), cfg, tlogWriter{t}, nil)
		require.ErrorContains(t, err, `nats-listen "localhost": `)
	})

	t.Run("bad nats listen port", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig(t, t.TempDir())
		cfg.NATSListen = "127.0.0.1:http"
		err := Run(context.Background(), cfg, tlogWriter{t}, nil)
		require.EqualError(t, err, `nats-listen "127.0.0.1:http": bad port`)
	})
}

func TestRetentionDefault(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		set  Duration
		want time.Duration
	}{{0, DefaultRetention}, {Duration(-time.Second), 0}, {Duration(time.Hour), time.Hour}} {
		c := Config{Retention: tt.set}
		require.Equal(t, tt.want, c.retention(), "retention %s", time.Duration(tt.set))
	}
}
