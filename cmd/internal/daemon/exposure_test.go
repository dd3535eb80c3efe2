package daemon

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natsconn"
	"github.com/sagad/sagad/internal/natstest"
)

func TestLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:4222": true, "127.1.2.3:1": true, "[::1]:4222": true, "localhost:9464": true,
		"0.0.0.0:4222": false, ":4222": false, "[::]:4222": false, "10.0.0.5:4222": false, "example.com:80": false,
	} {
		require.Equal(t, want, loopback(addr), addr)
	}
}

func TestPlainTextOffLoopbackRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "nats on all interfaces", args: []string{"--nats-listen", "0.0.0.0:4222"}, wantErr: "nats-listen 0.0.0.0:4222"},
		{name: "nats with no host", args: []string{"--nats-listen", ":4222"}, wantErr: "nats-listen :4222"},
		{name: "http on all interfaces", args: []string{"--http-listen", ":9464"}, wantErr: "http-listen :9464"},
		{name: "http off loopback even with nats TLS", args: []string{"--http-listen", "0.0.0.0:9464", "--server-tls-cert", "c", "--server-tls-key", "k"}, wantErr: "http-listen 0.0.0.0:9464"},
		{name: "insecure", args: []string{"--nats-listen", "0.0.0.0:4222", "--http-listen", ":9464", "--insecure", "--ui-token", tok("t")}},
		{name: "nats TLS", args: []string{"--nats-listen", "0.0.0.0:4222", "--server-tls-cert", "c", "--server-tls-key", "k"}},
		{name: "loopback", args: []string{"--nats-listen", "[::1]:4222", "--http-listen", "localhost:9464"}},
	}
	for _, tt := range tests {
		_, err := parseConfig(tt.args, envOf(nil), &bytes.Buffer{})
		if tt.wantErr == "" {
			require.NoError(t, err, tt.name)
			continue
		}
		require.ErrorIs(t, err, ErrInsecureListen, tt.name)
		require.ErrorContains(t, err, tt.wantErr, tt.name)
	}
	// With an outside NATS given by flag, a listen address from the
	// environment is dropped (and said to be): nothing listens.
	cfg, err := parseConfig([]string{"--nats-url", "nats://h:4222"}, envOf(map[string]string{"SAGAD_NATS_LISTEN": "0.0.0.0:4222"}), &bytes.Buffer{})
	require.NoError(t, err, "external NATS ignores a listen address from the environment")
	require.Empty(t, cfg.exposed())
	cfg = testConfig(t, t.TempDir())
	cfg.NATSListen = "0.0.0.0:-1"
	require.ErrorIs(t, Run(context.Background(), cfg, tlogWriter{t}, nil), ErrInsecureListen, "Run checks too")
}

func TestInsecureWarns(t *testing.T) {
	t.Parallel()
	// With an outside NATS given by flag, a listen address from the
	// environment is dropped (and said to be): nothing listens.
	cfg, err := parseConfig([]string{"--nats-url", "nats://h:4222"}, envOf(map[string]string{"SAGAD_NATS_LISTEN": "0.0.0.0:4222"}), &bytes.Buffer{})
	require.NoError(t, err, "external NATS ignores a listen address from the environment")
	require.Empty(t, cfg.exposed())
	cfg = testConfig(t, t.TempDir())
	cfg.NATSListen = "0.0.0.0:-1"
	cfg.Insecure = true
	logs, err := runExternal(t, natsconn.Options{}, func(c *Config) { c.NATSListen, c.Insecure = cfg.NATSListen, true })
	require.NoError(t, err)
	require.Contains(t, logs, "level=WARN msg=\"listening off loopback without TLS (--insecure)")
	require.Contains(t, logs, "listener=\"nats 0.0.0.0:-1\"")
}

// TestEmbeddedServerTLS: off loopback with a certificate, the embedded server
// takes TLS clients only; sagad itself connects in-process.
func TestEmbeddedServerTLS(t *testing.T) {
	t.Parallel()
	files := natstest.NewTLSFiles(t)
	// With an outside NATS given by flag, a listen address from the
	// environment is dropped (and said to be): nothing listens.
	cfg, err := parseConfig([]string{"--nats-url", "nats://h:4222"}, envOf(map[string]string{"SAGAD_NATS_LISTEN": "0.0.0.0:4222"}), &bytes.Buffer{})
	require.NoError(t, err, "external NATS ignores a listen address from the environment")
	require.Empty(t, cfg.exposed())
	cfg = testConfig(t, t.TempDir())
	cfg.NATSListen = "0.0.0.0:-1"
	cfg.ServerTLSCert, cfg.ServerTLSKey = files.ServerCert, files.ServerKey
	d := start(t, cfg)
	require.True(t, strings.HasPrefix(d.url, "tls://0.0.0.0:"), d.url)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(d.url, "tls://"))
	require.NoError(t, err)
	url := "tls://127.0.0.1:" + port

	_, err = natsconn.Options{URL: "nats://127.0.0.1:" + port}.Connect(nats.MaxReconnects(0))
	require.Error(t, err, "plain text is refused")

	nc, err := natsconn.Options{URL: url, TLSCA: files.CA, NKey: filepath.Join(CredsDir(cfg.DataDir), RoleSagad+natsconn.SeedExt)}.Connect()
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	client, err := client.NewClient(context.Background(), js)
	require.NoError(t, err)
	doc := capsuletest.New()
	_, err = client.Publish(context.Background(), doc.Sealed(t), "trace-tls")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := client.Wait(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)
}
