package daemon

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/cli"
	"github.com/sagad/sagad/internal/natsconn"
	"github.com/sagad/sagad/store"
)

// TestEmbeddedServerRequiresAuth: sagad writes one seed per role on first
// start (0600 in a 0700 directory), keeps them across restarts, and its
// server refuses anyone without one.
func TestEmbeddedServerRequiresAuth(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	cfg := testConfig(t, dataDir)
	d := start(t, cfg)

	_, err := nats.Connect(d.url, nats.MaxReconnects(0))
	require.ErrorIs(t, err, nats.ErrAuthorization, "an anonymous client is refused")

	dir := CredsDir(dataDir)
	info, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), info.Mode().Perm())
	seeds := map[string][]byte{}
	for _, role := range Roles {
		p := filepath.Join(dir, role+natsconn.SeedExt)
		info, err := os.Stat(p)
		require.NoError(t, err, role)
		require.Equal(t, os.FileMode(0o600), info.Mode().Perm(), role)
		seeds[role], err = os.ReadFile(p)
		require.NoError(t, err)
		nc, err := natsconn.Options{URL: d.url, NKey: p}.Connect(nats.MaxReconnects(0))
		require.NoError(t, err, "%s connects with its seed", role)
		nc.Close()
	}
	require.NoError(t, d.stop(t))

	d2 := start(t, cfg)
	for _, role := range Roles {
		b, err := os.ReadFile(filepath.Join(dir, role+natsconn.SeedExt))
		require.NoError(t, err)
		require.Equal(t, seeds[role], b, "%s's seed survives a restart", role)
	}
	require.NoError(t, d2.stop(t))
}

// TestSagactlFindsOperatorSeed: run from sagad's directory, sagactl
// publishes and waits with no credentials flag (README's commands). Not
// parallel: it changes the working directory.
func TestSagactlFindsOperatorSeed(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, filepath.Join(dir, "data"))
	d := start(t, cfg)
	t.Chdir(dir)

	doc := capsuletest.New()
	capsuleFile := filepath.Join(dir, "capsule.json")
	require.NoError(t, os.WriteFile(capsuleFile, doc.Sealed(t), 0o600))
	sagactl := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := cli.Main(append([]string{"--nats-url", d.url}, args...), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	code, out := sagactl("publish", capsuleFile)
	require.Equal(t, cli.ExitOK, code, out)
	code, out = sagactl("wait", doc.ID(), "--timeout", "30s")
	require.Equal(t, cli.ExitOK, code, out)

	require.NoError(t, os.Rename(filepath.Join(dir, "data", "creds", "operator.nk"), filepath.Join(dir, "elsewhere.nk")))
	code, out = sagactl("status", doc.ID())
	require.Equal(t, cli.ExitFailure, code)
	require.Contains(t, out, "Authorization Violation", "without the seed sagactl is refused")
	code, out = sagactl("--nats-nkey", filepath.Join(dir, "elsewhere.nk"), "status", doc.ID())
	require.Equal(t, cli.ExitOK, code, out)
}

// TestRolesStayInTheirLane: on sagad's embedded server, no role reaches
// across the boundaries SECURITY.md draws. A worker cannot act as an
// operator (publish on saga.admin.>) nor serve the admin service in
// sagad's place (subscribe to it); a producer cannot call the admin service
// or touch JetStream's API; an operator cannot forge the result of external
// work (saga.complete.>), ack or purge sagad's messages, remove or rewrite
// sagad's consumers, create consumers beyond the checkpoints and events it
// follows, or listen to executor calls. TestDeployConfRoles covers the
// forgeries of sagad's own subjects (phases, checkpoints, events, outcomes).
func TestRolesStayInTheirLane(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	d := start(t, testConfig(t, dataDir))
	as := func(role string) natsconn.Options {
		return natsconn.Options{URL: d.url, NKey: filepath.Join(CredsDir(dataDir), role+natsconn.SeedExt)}
	}
	var admin []string
	for _, verb := range adminsvc.Verbs {
		admin = append(admin, adminsvc.Subject(verb))
	}
	jsAPI := []string{
		"$JS.API.STREAM.PURGE." + store.PhaseStream(capsule.Execution),
		"$JS.API.STREAM.DELETE." + store.IntakeStream,
		"$JS.API.STREAM.MSG.DELETE." + store.OutcomesStream,
		"$JS.API.CONSUMER.DELETE." + store.PhaseStream(capsule.Execution) + "." + store.ConsumerName(capsule.Execution),
		"$JS.API.CONSUMER.DELETE." + store.CompletionsStream + "." + store.CompletionsConsumer,
		"$JS.ACK." + store.PhaseStream(capsule.Execution) + "." + store.ConsumerName(capsule.Execution) + ".1.1.1.1.0",
		"$KV." + store.CapsulesBucket + ".x",
		"$KV." + store.ContinuationsBucket + ".x",
	}
	// A consumer create also updates: on a phase stream it would rewrite
	// sagad's own consumer, and a push consumer anywhere delivers to any
	// subject it names, publish rights or not.
	phase4 := store.PhaseStream(capsule.Execution)
	consumers := []string{
		"$JS.API.CONSUMER.CREATE." + phase4 + "." + store.ConsumerName(capsule.Execution),
		"$JS.API.CONSUMER.CREATE." + phase4 + "." + store.ConsumerName(capsule.Execution) + ".saga.phase.4",
		"$JS.API.CONSUMER.CREATE." + phase4,
		"$JS.API.CONSUMER.DURABLE.CREATE." + phase4 + "." + store.ConsumerName(capsule.Execution),
		"$JS.API.CONSUMER.CREATE." + store.CompletionsStream + "." + store.CompletionsConsumer,
		"$JS.API.CONSUMER.CREATE." + store.OutcomesStream + ".x",
		"$JS.API.CONSUMER.MSG.NEXT." + phase4 + "." + store.ConsumerName(capsule.Execution),
	}
	for _, tt := range []struct {
		role          string
		publish, subs []string
	}{
		{RoleWorker, admin, []string{"saga.admin.>", adminsvc.Subject(adminsvc.VerbCancel), "saga.intake", "saga.phase.>", "$KV.>"}},
		{RoleProducer, append(append([]string{"$SRV.PING"}, admin...), jsAPI...), []string{"saga.admin.>", "agents.>", "saga.complete.>", "$KV.>"}},
		{RoleOperator, append(append([]string{"saga.complete.x.1", executors.CompletionSubject(capsuletest.NewID(), 1)}, jsAPI...), consumers...), []string{"agents.>", "saga.complete.>", "saga.admin.>", "$KV.>"}},
	} {
		for _, subject := range tt.publish {
			requireRefused(t, as(tt.role), subject)
		}
		for _, subject := range tt.subs {
			requireSubscribeRefused(t, as(tt.role), subject)
		}
	}

	// The same connections still do their own work: the refusals are
	// NATS's, not a broken login.
	worker, err := as(RoleWorker).Connect()
	require.NoError(t, err)
	defer worker.Close()
	require.NoError(t, worker.Publish(executors.CompletionSubject(capsuletest.NewID(), 1), []byte("{}")))
	require.NoError(t, worker.Flush())
	operator, err := as(RoleOperator).Connect()
	require.NoError(t, err)
	defer operator.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = adminsvc.NewClient(operator, adminsvc.ClientConfig{}).Phases(ctx)
	require.NoError(t, err, "the operator calls the admin service")
}

// requireSubscribeRefused subscribes to subject as conn and requires NATS to
// answer with a permissions violation for it.
func requireSubscribeRefused(t *testing.T, conn natsconn.Options, subject string) {
	t.Helper()
	errs := make(chan error, 4)
	nc, err := conn.Connect(nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	require.NoError(t, err)
	defer nc.Close()
	_, err = nc.SubscribeSync(subject)
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	select {
	case err := <-errs:
		require.True(t, errors.Is(err, nats.ErrPermissionViolation), "%s subscribing to %s: %v", who(conn), subject, err)
		require.Contains(t, strings.ToLower(err.Error()), strings.ToLower("subscription to \""+subject+"\""))
	case <-time.After(10 * time.Second):
		t.Fatalf("%s subscribing to %s: no permissions violation within 10s", who(conn), subject)
	}
}
