package daemon

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/natsconn"
	"github.com/sagad/sagad/internal/natstest"
)

// logBuffer keeps everything sagad logs (from several goroutines) and
// passes it on to t.Log.
type logBuffer struct {
	t  testing.TB
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Log(strings.TrimSpace(string(p)))
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runExternal runs sagad against an external server with conn (or the
// embedded one if conn has no URL) and returns
// what it logged and Run's error; a sagad that connects is stopped once
// ready.
func runExternal(t *testing.T, conn natsconn.Options, configure ...func(*Config)) (string, error) {
	t.Helper()
	cfg := testConfig(t, t.TempDir())
	cfg.Options = conn
	for _, f := range configure {
		f(&cfg)
	}
	cfg.LogLevel = "debug"
	logs := &logBuffer{t: t}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, logs, func(string) { cancel() }) }()
	select {
	case err := <-done:
		return logs.String(), err
	case <-time.After(60 * time.Second):
		t.Fatal("sagad neither failed nor became ready within 60s")
		return "", nil
	}
}

func secretFile(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(p, []byte(s+"\n"), 0o600))
	return p
}

// TestSecretsNeverLogged: whatever the way a password or token is given,
// and whether it is right or wrong, it appears in no log line and no error.
func TestSecretsNeverLogged(t *testing.T) {
	t.Parallel()
	const password, token = "hunter2-pa55word", "t0ken-9f8e7d6c"
	// Each case has a server of its own: two sagads laying out their
	// topology on one in-process server at the same moment trip a data race
	// inside nats-server (a stream update beside a consumer create), which
	// -race reports against this test.
	userSrv := func(t *testing.T) string {
		return natstest.RunServerWith(t, func(o *server.Options) { o.Username, o.Password = "sagad", password }).ClientURL()
	}
	tokenSrv := func(t *testing.T) string {
		return natstest.RunServerWith(t, func(o *server.Options) { o.Authorization = token }).ClientURL()
	}
	withUserinfo := func(url, info string) string { return strings.Replace(url, "nats://", "nats://"+info+"@", 1) }
	tests := []struct {
		name   string
		conn   func(t *testing.T) natsconn.Options
		wantOK bool
	}{
		{"password in the URL", func(t *testing.T) natsconn.Options {
			return natsconn.Options{URL: withUserinfo(userSrv(t), "sagad:"+password)}
		}, true},
		{"wrong password in the URL", func(t *testing.T) natsconn.Options {
			return natsconn.Options{URL: withUserinfo(userSrv(t), "sagad:"+password+"-wrong")}
		}, false},
		{"token in the URL", func(t *testing.T) natsconn.Options { return natsconn.Options{URL: withUserinfo(tokenSrv(t), token)} }, true},
		{"wrong token in the URL", func(t *testing.T) natsconn.Options {
			return natsconn.Options{URL: withUserinfo(tokenSrv(t), token+"-wrong")}
		}, false},
		{"token", func(t *testing.T) natsconn.Options { return natsconn.Options{URL: tokenSrv(t), Token: token} }, true},
		{"wrong token", func(t *testing.T) natsconn.Options {
			return natsconn.Options{URL: tokenSrv(t), Token: token + "-wrong"}
		}, false},
		{"password file", func(t *testing.T) natsconn.Options {
			return natsconn.Options{URL: userSrv(t), User: "sagad", PasswordFile: secretFile(t, password)}
		}, true},
		{"wrong password file", func(t *testing.T) natsconn.Options {
			return natsconn.Options{URL: userSrv(t), User: "sagad", PasswordFile: secretFile(t, password+"-wrong")}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logs, err := runExternal(t, tt.conn(t))
			all := logs
			if tt.wantOK {
				require.NoError(t, err)
				require.Contains(t, logs, "nats connected")
			} else {
				require.Error(t, err)
				require.Contains(t, err.Error(), "Authorization Violation")
				all += err.Error()
			}
			require.NotContains(t, all, password)
			require.NotContains(t, all, token)
		})
	}
}

// TestExternalMutualTLS: sagad joins a server that requires TLS and a
// client certificate, with the flags.
func TestExternalMutualTLS(t *testing.T) {
	t.Parallel()
	files := natstest.NewTLSFiles(t)
	s := natstest.RunTLSServer(t, files)
	cfg, err := parseConfig([]string{
		"--nats-url", strings.Replace(s.ClientURL(), "nats://", "tls://", 1),
		"--tls-ca", files.CA, "--tls-cert", files.ClientCert, "--tls-key", files.ClientKey,
	}, envOf(nil), &bytes.Buffer{})
	require.NoError(t, err)
	logs, err := runExternal(t, cfg.Options)
	require.NoError(t, err)
	require.Contains(t, logs, "nats connected")

	// Without the client certificate the server refuses sagad.
	cfg.TLSCert, cfg.TLSKey = "", ""
	_, err = runExternal(t, cfg.Options)
	require.Error(t, err)
}
