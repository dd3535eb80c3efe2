package daemon

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/examples/worker/worker"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natsconn"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/store"
)

// deployConf is the nats-server configuration for an external server; it
// includes deployAccounts, `sagad nats-config --passwords` of
// examples/sagad.json.
var (
	deployConf      = filepath.Join("..", "..", "..", "deploy", "nats", "nats.conf")
	deployAccounts  = filepath.Join("..", "..", "..", "deploy", "nats", NATSAccountsFile)
	composeAccounts = filepath.Join("..", "..", "..", "deploy", "compose", "nats", NATSAccountsFile)
	exampleConfig   = filepath.Join("..", "..", "..", "examples", "sagad.json")
)

// deployRoles are the users of examples/sagad.json's accounts.
var deployRoles = []string{RoleSagad, RoleOperator, RoleProducer, "executor-demo", "reviewer-demo-reviewer"}

// deployPassword is the password the deploy tests give role.
func deployPassword(role string) string { return "pw-" + role + "-0123456789" }

// loadDeployConf reads deployConf with a password per role set in the
// environment (so its callers cannot be parallel).
func loadDeployConf(t *testing.T) *server.Options {
	t.Helper()
	for _, role := range deployRoles {
		t.Setenv(PasswordEnv(role), deployPassword(role))
	}
	opts, err := server.ProcessConfigFile(deployConf)
	require.NoError(t, err)
	return opts
}

// TestDeployAccountsGenerated: the committed accounts files are what `sagad
// nats-config --passwords` writes for examples/sagad.json (regenerate them
// with it when the accounts change).
func TestDeployAccountsGenerated(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig([]string{"--config", exampleConfig}, envOf(nil), io.Discard)
	require.NoError(t, err)
	want, err := natsConfigText(cfg.accountSpec(), "", true)
	require.NoError(t, err)
	for _, f := range []string{deployAccounts, composeAccounts} {
		got, err := os.ReadFile(f)
		require.NoError(t, err)
		require.Equal(t, want, string(got), "%s: run sagad nats-config --config examples/sagad.json --passwords --out %s", f, filepath.Dir(f))
	}
}

// TestNATSConfigCommand: `sagad nats-config` writes the accounts with a
// seed per role, keeps the seeds on a second run, and a server configured
// from its output lets each seed in.
func TestNATSConfigCommand(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	run := func() string {
		var stdout, stderr bytes.Buffer
		code := natsConfig([]string{"--config", exampleConfig, "--out", out}, envOf(nil), &stdout, &stderr)
		require.Equal(t, 0, code, stderr.String())
		b, err := os.ReadFile(filepath.Join(out, NATSAccountsFile))
		require.NoError(t, err)
		return string(b)
	}
	first := run()
	require.Equal(t, first, run(), "existing seeds are kept")
	s := natstest.RunServerWith(t, func(o *server.Options) {
		require.NoError(t, o.ProcessConfigString(first))
		o.Host, o.Port, o.JetStream, o.StoreDir = "127.0.0.1", -1, true, t.TempDir()
	})
	for _, role := range deployRoles {
		nc, err := natsconn.Options{URL: s.ClientURL(), NKey: filepath.Join(CredsDir(out), role+natsconn.SeedExt)}.Connect(nats.MaxReconnects(0))
		require.NoError(t, err, role)
		nc.Close()
	}
	var stderr bytes.Buffer
	bad := writeConfig(t, `{"producers": ["operator"]}`)
	require.Equal(t, 1, natsConfig([]string{"--config", bad, "--out", t.TempDir()}, envOf(nil), io.Discard, &stderr))
	require.Contains(t, stderr.String(), "a role of its own")
}

// TestDeployConfRoles: on a server configured from the example files, sagad,
// a producer, the demo worker and the operator each with only their own
// credentials run a capsule to completion, and nothing of sagad's account
// answers the others. Not parallel: it sets environment variables.
func TestDeployConfRoles(t *testing.T) {
	fileOpts := loadDeployConf(t)
	s := natstest.RunServerWith(t, func(o *server.Options) {
		o.Accounts, o.Users, o.NoAuthUser = fileOpts.Accounts, fileOpts.Users, ""
	})
	as := func(role string) natsconn.Options {
		return natsconn.Options{URL: s.ClientURL(), User: role, Password: deployPassword(role)}
	}

	// sagad, with the demo worker's executor and reviewer.
	cfg, err := parseConfig([]string{
		"--config", exampleConfig, "--data-dir", t.TempDir(), "--workspace", capsuletest.Workspace(t),
		"--http-listen", "off", "--log-level", "warn", "--shutdown-timeout", "10s",
	}, envOf(nil), io.Discard)
	require.NoError(t, err)
	cfg.Options = as(RoleSagad)
	start(t, cfg)
	for role, only := range map[string]string{"executor-demo": "execute", "reviewer-demo-reviewer": "review"} {
		nc, err := as(role).Connect()
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		svc, err := worker.Serve(nc, worker.Config{Only: only})
		require.NoError(t, err)
		t.Cleanup(func() { _ = svc.Stop() })
	}

	// A producer publishes a capsule for the demo worker.
	producer, err := as(RoleProducer).Connect()
	require.NoError(t, err)
	t.Cleanup(producer.Close)
	pjs, err := jetstream.New(producer)
	require.NoError(t, err)
	doc := capsuletest.New().Set("task.kind", "demo").Set("review.reviewer_agent_id", "demo-reviewer")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = pjs.Publish(ctx, store.IntakeSubject, doc.Sealed(t))
	require.NoError(t, err)

	// sagad's own connection sees it complete.
	sagad, err := as(RoleSagad).Connect()
	require.NoError(t, err)
	t.Cleanup(sagad.Close)
	sjs, err := jetstream.New(sagad)
	require.NoError(t, err)
	kv, err := sjs.KeyValue(ctx, store.CheckpointsBucket)
	require.NoError(t, err)
	natstest.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool {
		e, err := kv.Get(ctx, doc.ID())
		return err == nil && bytes.Contains(e.Value(), []byte(`"status":"completed"`))
	}, "capsule %s never completed", doc.ID())

	// The operator reaches the admin service, and nothing else of sagad's.
	op, err := as(RoleOperator).Connect()
	require.NoError(t, err)
	t.Cleanup(op.Close)
	_, err = adminsvc.NewClient(op, adminsvc.ClientConfig{}).Phases(ctx)
	require.NoError(t, err)
	for _, role := range []string{RoleProducer, RoleOperator, "executor-demo"} {
		nc, err := as(role).Connect()
		require.NoError(t, err)
		for _, subject := range []string{"saga.phase.4", "$KV.SAGA_CHECKPOINTS.x", "saga.events.x", "saga.outcome.completed", "$JS.API.INFO"} {
			requireUnreached(t, nc, role, subject)
		}
		nc.Close()
	}
}

// TestDeployFilesUseDefaultHTTPListen keeps the scrape example, the example
// config and the READMEs on sagad's default port, and off Prometheus's own.
func TestDeployFilesUseDefaultHTTPListen(t *testing.T) {
	t.Parallel()
	_, port, err := net.SplitHostPort(DefaultHTTPListen)
	require.NoError(t, err)
	require.NotEqual(t, "9090", port, "9090 is Prometheus's own port")
	for _, f := range []string{"deploy/prometheus/prometheus.yml", "deploy/README.md", "README.md", "examples/sagad.json"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", f))
		require.NoError(t, err)
		require.Contains(t, string(b), DefaultHTTPListen, f)
		require.NotContains(t, string(b), "127.0.0.1:9090", f)
	}
	cfg, err := parseConfig(nil, envOf(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, DefaultHTTPListen, cfg.HTTPListen)
}
