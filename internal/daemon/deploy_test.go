package daemon

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/cli"
	"github.com/sagad/sagad/internal/natsconn"
	"github.com/sagad/sagad/internal/natstest"
)

// deployConf is the permissions example for an external server.
var deployConf = filepath.Join("..", "..", "deploy", "nats", "permissions.conf")

// deployPasswords are the environment variables deployConf reads.
var deployPasswords = map[string]string{
	RoleSagad: "SAGA_SAGAD_PASSWORD", RoleOperator: "SAGA_OPERATOR_PASSWORD",
	RoleProducer: "SAGA_PRODUCER_PASSWORD", RoleWorker: "SAGA_WORKER_PASSWORD",
}

// loadDeployConf reads deployConf with a password per role set in the
// environment (so its callers cannot be parallel).
func loadDeployConf(t *testing.T) *server.Options {
	t.Helper()
	for role, env := range deployPasswords {
		t.Setenv(env, "pw-"+role+"-0123456789")
	}
	opts, err := server.ProcessConfigFile(deployConf)
	require.NoError(t, err)
	return opts
}

// TestDeployConfMatchesEmbedded: the example file grants each role exactly
// what the embedded server does.
func TestDeployConfMatchesEmbedded(t *testing.T) {
	opts := loadDeployConf(t)
	require.Len(t, opts.Users, len(Roles))
	for _, u := range opts.Users {
		want := RolePermissions(u.Username)
		require.Equal(t, "pw-"+u.Username+"-0123456789", u.Password)
		if want == nil {
			require.Nil(t, u.Permissions, u.Username)
			continue
		}
		got := u.Permissions
		require.NotNil(t, got, u.Username)
		require.ElementsMatch(t, want.Publish.Allow, got.Publish.Allow, "%s publish", u.Username)
		require.Empty(t, got.Publish.Deny, u.Username)
		require.ElementsMatch(t, want.Subscribe.Allow, got.Subscribe.Allow, "%s subscribe", u.Username)
		require.Empty(t, got.Subscribe.Deny, u.Username)
		require.Equal(t, want.Response, got.Response, "%s responses", u.Username)
	}
}

// TestDeployConfRoles: on a server configured from the example file, sagad,
// a producer and sagactl each with only their own rights run a capsule to
// completion, and a producer or worker forging sagad's messages is refused
// by NATS. Not parallel: it sets environment variables.
func TestDeployConfRoles(t *testing.T) {
	fileOpts := loadDeployConf(t)
	s := natstest.RunServerWith(t, func(o *server.Options) {
		o.Users = fileOpts.Users
		o.NoAuthUser = ""
	})
	as := func(role string) natsconn.Options {
		return natsconn.Options{URL: s.ClientURL(), User: role, Password: "pw-" + role + "-0123456789"}
	}

	// sagad.
	cfg := testConfig(t, t.TempDir())
	cfg.Options = as(RoleSagad)
	start(t, cfg)

	// A producer publishes a capsule.
	producer, err := as(RoleProducer).Connect()
	require.NoError(t, err)
	t.Cleanup(producer.Close)
	pjs, err := jetstream.New(producer)
	require.NoError(t, err)
	doc := capsuletest.New()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pjs.Publish(ctx, "saga.intake", doc.Sealed(t))
	require.NoError(t, err)

	// sagactl, as the operator, waits for it and reads it.
	pwFile := secretFile(t, as(RoleOperator).Password)
	sagactl := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := cli.Main(append([]string{"--nats-url", s.ClientURL(), "--nats-user", RoleOperator, "--nats-password-file", pwFile}, args...), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	code, out := sagactl("wait", doc.ID(), "--timeout", "30s")
	require.Equal(t, cli.ExitOK, code, out)
	for _, args := range [][]string{{"status", doc.ID()}, {"history", doc.ID()}, {"list"}, {"report", doc.ID()}, {"watch", doc.ID(), "--since", "1h", "--count", "2"}} {
		code, out := sagactl(args...)
		require.Equal(t, cli.ExitOK, code, "%v: %s", args, out)
	}

	// Forgeries.
	worker, err := as(RoleWorker).Connect()
	require.NoError(t, err)
	t.Cleanup(worker.Close)
	forged := []string{"saga.phase.4", "$KV.SAGA_CHECKPOINTS.x", "saga.events.x", "saga.outcome.completed"}
	for _, tt := range []struct {
		role     string
		subjects []string
	}{
		{RoleProducer, append(forged, "saga.complete.x.1")},
		{RoleWorker, forged},
		{RoleOperator, forged},
	} {
		for _, subject := range tt.subjects {
			requireRefused(t, as(tt.role), subject)
		}
	}
	// What the roles may do still works after the refusals.
	require.NoError(t, worker.Publish("saga.complete.x.1", []byte("{}")))
	require.NoError(t, worker.Flush())
}

// requireRefused publishes on subject as conn and requires NATS to answer
// with a permissions violation for it.
func requireRefused(t *testing.T, conn natsconn.Options, subject string) {
	t.Helper()
	errs := make(chan error, 4)
	nc, err := conn.Connect(nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, nc.Publish(subject, []byte("forged")))
	require.NoError(t, nc.Flush())
	select {
	case err := <-errs:
		require.True(t, errors.Is(err, nats.ErrPermissionViolation), "%s publishing %s: %v", who(conn), subject, err)
		require.Contains(t, strings.ToLower(err.Error()), strings.ToLower(subject))
	case <-time.After(10 * time.Second):
		t.Fatalf("%s publishing %s: no permissions violation within 10s", who(conn), subject)
	}
}

// who names the user conn connects as, for failure messages.
func who(conn natsconn.Options) string {
	if conn.User != "" {
		return conn.User
	}
	return filepath.Base(conn.NKey)
}

// TestDeployFilesUseDefaultHTTPListen keeps the scrape example, the example
// config and the READMEs on sagad's default port, and off Prometheus's own.
func TestDeployFilesUseDefaultHTTPListen(t *testing.T) {
	t.Parallel()
	_, port, err := net.SplitHostPort(DefaultHTTPListen)
	require.NoError(t, err)
	require.NotEqual(t, "9090", port, "9090 is Prometheus's own port")
	for _, f := range []string{"deploy/prometheus/prometheus.yml", "deploy/README.md", "README.md", "examples/sagad.json"} {
		b, err := os.ReadFile(filepath.Join("..", "..", f))
		require.NoError(t, err)
		require.Contains(t, string(b), DefaultHTTPListen, f)
		require.NotContains(t, string(b), "127.0.0.1:9090", f)
	}
	cfg, err := parseConfig(nil, envOf(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, DefaultHTTPListen, cfg.HTTPListen)
}
