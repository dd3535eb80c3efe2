package daemon

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/artifactsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
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
	for _, role := range baseRoles {
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
	for _, role := range baseRoles {
		b, err := os.ReadFile(filepath.Join(dir, role+natsconn.SeedExt))
		require.NoError(t, err)
		require.Equal(t, seeds[role], b, "%s's seed survives a restart", role)
	}
	require.NoError(t, d2.stop(t))
}

// TestSagactlFindsOperatorSeed: run from sagad's directory, sagactl
// publishes with no credentials flag (README's commands), into the
// operator's account, whose intake reaches sagad's. Not parallel: it
// changes the working directory.
func TestSagactlFindsOperatorSeed(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, filepath.Join(dir, "data"))
	d := start(t, cfg)
	t.Chdir(dir)

	capsuleFile := func(doc capsuletest.Doc) string {
		p := filepath.Join(dir, doc.ID()+".json")
		require.NoError(t, os.WriteFile(p, doc.Sealed(t), 0o600))
		return p
	}
	sagactl := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := cli.Main(append([]string{"--nats-url", d.url}, args...), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	doc := capsuletest.New()
	code, out := sagactl("publish", capsuleFile(doc))
	require.Equal(t, cli.ExitOK, code, out)
	_, c := connect(t, d.url, filepath.Join(dir, "data"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.Wait(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)

	require.NoError(t, os.Rename(filepath.Join(dir, "data", "creds", "operator.nk"), filepath.Join(dir, "elsewhere.nk")))
	other := capsuletest.New()
	code, out = sagactl("publish", capsuleFile(other))
	require.Equal(t, cli.ExitFailure, code)
	require.Contains(t, out, "Authorization Violation", "without the seed sagactl is refused")
	require.Contains(t, out, "no credentials: "+filepath.Join(dir, "data", "creds", "operator.nk")+", the operator's seed sagactl uses by default, does not exist here",
		"the hint names the file it looked for")
	require.Contains(t, out, "--nats-nkey <sagad's data dir>/creds/operator.nk (env SAGA_NATS_NKEY)")
	require.NotContains(t, out, "is sagad running?", "sagad is running: the seed is what is missing")
	code, out = sagactl("--nats-nkey", filepath.Join(dir, "elsewhere.nk"), "publish", capsuleFile(other))
	require.Equal(t, cli.ExitOK, code, out)

	// A seed of another role is refused by the admin service's absence
	// from its account, not by a sagad that is not running.
	producer := filepath.Join(dir, "data", "creds", "producer.nk")
	const unreachable = "sagactl: this credential cannot reach sagad's admin service: it logs in to NATS account PRODUCER, and only the operator's account (OPERATOR, "
	code, out = sagactl("--nats-nkey", producer, "status", doc.ID())
	require.Equal(t, cli.ExitFailure, code, out)
	require.True(t, strings.HasPrefix(out, unreachable), out)
	code, out = sagactl("--nats-nkey", producer, "cancel", doc.ID())
	require.Equal(t, cli.ExitNoSagad, code, out)
	require.True(t, strings.HasPrefix(out, unreachable), out)
	code, out = sagactl("--nats-nkey", filepath.Join(dir, "elsewhere.nk"), "status", doc.ID())
	require.Equal(t, cli.ExitOK, code, "the operator's seed reaches it: %s", out)
}

// baseRoles are the users of a configuration without NATS executors,
// reviewers or named producers.
var baseRoles = []string{RoleSagad, RoleOperator, RoleProducer}

// TestRolesStayInTheirLane: on sagad's embedded server each role is an
// account of its own, so sagad's subjects are not there to reach: nothing
// answers a producer calling the admin service or JetStream's API, a
// worker calling the admin service or publishing intake, or an operator
// forging the result of external work (saga.complete.>), acking, purging or
// rewriting sagad's consumers. roles_attack_test.go plays the attacks the
// review found.
func TestRolesStayInTheirLane(t *testing.T) {
	t.Parallel()
	a := newArena(t)
	var admin []string
	for _, verb := range adminsvc.Verbs {
		admin = append(admin, adminsvc.Subject(verb))
	}
	phase4 := store.PhaseStream(capsule.Execution)
	jsAPI := []string{
		"$JS.API.INFO",
		"$JS.API.STREAM.PURGE." + phase4,
		"$JS.API.STREAM.DELETE." + store.IntakeStream,
		"$JS.API.STREAM.MSG.DELETE." + store.OutcomesStream,
		"$JS.API.DIRECT.GET.KV_" + store.CapsulesBucket,
		"$JS.API.CONSUMER.DELETE." + phase4 + "." + store.ConsumerName(capsule.Execution),
		"$JS.API.CONSUMER.CREATE." + phase4 + "." + store.ConsumerName(capsule.Execution),
		"$JS.API.CONSUMER.MSG.NEXT." + phase4 + "." + store.ConsumerName(capsule.Execution),
		"$JS.ACK." + phase4 + "." + store.ConsumerName(capsule.Execution) + ".1.1.1.1.0",
		"$KV." + store.CheckpointsBucket + ".x",
		"$KV." + store.CapsulesBucket + ".x",
		// An artifact's record: the content a worker may read only through
		// saga.artifacts.get, with its call's token.
		"$JS.API.DIRECT.GET.KV_" + store.ArtifactRecordsBucket + ".$KV." + store.ArtifactRecordsBucket + ".x/1",
		"$JS.API.STREAM.MSG.GET.KV_" + store.ArtifactRecordsBucket,
		"$KV." + store.ArtifactRecordsBucket + ".x/1",
		"saga.phase.4", "saga.events.x", "saga.outcome.completed",
		// REVIEW's message may name a claim its first delivery adopts
		// (Saga-Claim): only sagad's account sends it.
		store.PhaseSubject(capsule.ReviewPhase),
	}
	for _, tt := range []struct {
		role     string
		subjects []string
	}{
		// An executor's saga.intake is its child capsules' (README
		// "Delegation and the depth budget"): a reviewer has none.
		{"executor-demo", append(append([]string{"saga.intake.producer", "agents.demo.review"}, admin...), jsAPI...)},
		{"reviewer-demo-reviewer", append(append([]string{store.IntakeSubject, "saga.intake.producer", "agents.demo.execute"}, admin...), jsAPI...)},
		{RoleProducer, append(append([]string{"saga.complete.x.1", "saga.intake.operator", "agents.demo.execute", artifactsvc.Subject}, admin...), jsAPI...)},
		{RoleOperator, append([]string{"saga.complete.x.1", executors.CompletionSubject(capsuletest.NewID(), 1), "agents.demo.execute", "saga.intake.producer"}, jsAPI...)},
	} {
		nc := a.conn(tt.role)
		for _, subject := range tt.subjects {
			requireUnreached(t, nc, tt.role, subject)
		}
	}

	// The same connections still do their own work.
	worker := a.conn("executor-demo")
	wjs, err := jetstream.New(worker)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = wjs.Publish(ctx, executors.CompletionSubject(capsuletest.NewID(), 1), []byte("{}"))
	require.NoError(t, err, "a worker publishes a completion and gets its acknowledgement")
	// A worker reaches sagad's artifacts service, which hands it nothing
	// without a live call's token.
	m, err := worker.Request(artifactsvc.Subject, []byte(`{"ref":"artifact:`+capsuletest.NewID()+`/1","token":"guess"}`), 10*time.Second)
	require.NoError(t, err, "a worker reaches saga.artifacts.get")
	require.Equal(t, "403", m.Header.Get(micro.ErrorCodeHeader), "%s", m.Data)
	require.Contains(t, string(m.Data), artifactsvc.CodeForbidden)
	_, err = adminsvc.NewClient(a.conn(RoleOperator), adminsvc.ClientConfig{}).Phases(ctx)
	require.NoError(t, err, "the operator calls the admin service")
}

// requireUnreached requires a request on subject from nc's account to reach
// nothing of sagad's: no responder, or, on JetStream's API, the server
// saying the account has no JetStream.
func requireUnreached(t *testing.T, nc *nats.Conn, role, subject string) {
	t.Helper()
	m, err := nc.Request(subject, []byte("{}"), 5*time.Second)
	if err == nil {
		require.Contains(t, string(m.Data), "not enabled for account", "%s reaches %s: %s", role, subject, m.Data)
		return
	}
	require.ErrorIs(t, err, nats.ErrNoResponders, "%s reaches %s", role, subject)
}

// TestSagactlNamesTheWrongRole: with a worker's seed, sagactl's publish and
// reads reach nothing of sagad's (the worker's account imports neither
// saga.intake nor saga.admin.>), and sagactl says so instead of asking
// whether sagad is running; a producer's seed publishes.
func TestSagactlNamesTheWrongRole(t *testing.T) {
	t.Parallel()
	a := newArena(t)
	doc := capsuletest.New()
	p := filepath.Join(t.TempDir(), "capsule.json")
	require.NoError(t, os.WriteFile(p, doc.Sealed(t), 0o600))
	sagactl := func(role string, args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := cli.Main(append([]string{"--nats-url", a.d.url, "--nats-nkey", a.as(role).NKey}, args...), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	// A reviewer's: an executor's publishes child capsules (its account
	// imports saga.intake for that alone).
	code, out := sagactl("reviewer-demo-reviewer", "publish", p)
	require.Equal(t, cli.ExitFailure, code, out)
	require.True(t, strings.HasPrefix(out, "sagactl: this credential cannot publish capsules: it logs in to NATS account REVIEWER_DEMO_REVIEWER, which has no saga.intake; "), out)
	code, out = sagactl("executor-demo", "list")
	require.Equal(t, cli.ExitFailure, code, out)
	require.True(t, strings.HasPrefix(out, "sagactl: this credential cannot reach sagad's admin service: it logs in to NATS account EXECUTOR_DEMO"), out)
	code, out = sagactl(RoleProducer, "publish", p)
	require.Equal(t, cli.ExitOK, code, "a producer publishes: %s", out)
}
