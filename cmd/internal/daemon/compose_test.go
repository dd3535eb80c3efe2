package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sagad/sagad/internal/capsuletest"
	freeports "github.com/sagad/sagad/internal/loopback"
	"github.com/sagad/sagad/internal/natsconn"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/store"
)

// The compose kit (deploy/compose), checked without Docker: its sagad
// arguments against sagad's real flags, environment and config file, and
// its NATS configuration run in-process as the 3-node cluster it describes.
var (
	composeDir      = filepath.Join("..", "..", "..", "deploy", "compose")
	composeFile     = filepath.Join(composeDir, "compose.yaml")
	composeNATSConf = filepath.Join(composeDir, "nats", "nats.conf")
)

type composeService struct {
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
}

func readComposeFile(t *testing.T) map[string]composeService {
	t.Helper()
	b, err := os.ReadFile(composeFile)
	require.NoError(t, err)
	var c struct {
		Services map[string]composeService `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(b, &c))
	return c.Services
}

// composeDefault resolves compose's ${NAME:-default} to the default, as
// compose does without a .env file.
var composeDefault = regexp.MustCompile(`\$\{[A-Z_]+:-([^}]*)\}`)

func resolve(s string) string { return composeDefault.ReplaceAllString(s, "$1") }

// hostPath maps a container path to the host path a bind mount of svc
// puts there, or returns it unchanged.
func hostPath(svc composeService, p string) string {
	for _, v := range svc.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || !strings.HasPrefix(parts[0], ".") {
			continue
		}
		if rest, ok := strings.CutPrefix(p, parts[1]+"/"); ok {
			return filepath.Join(composeDir, parts[0], rest)
		}
	}
	return p
}

// composeSagadConfig is what sagad makes of a compose sagad service's
// command and environment, container paths read from their host side.
func composeSagadConfig(t *testing.T, svc composeService, override map[string]string) (Config, []string, map[string]string) {
	t.Helper()
	var args []string
	for _, a := range svc.Command {
		a = resolve(a)
		if name, val, ok := strings.Cut(a, "="); ok && name == "--config" {
			a = name + "=" + hostPath(svc, val)
		}
		args = append(args, a)
	}
	env := map[string]string{}
	for k, v := range svc.Environment {
		env[k] = resolve(v)
	}
	// The image's own environment (Dockerfile ENV).
	env["SAGAD_DATA_DIR"], env["SAGAD_WORKSPACE"] = t.TempDir(), "/workspace"
	for k, v := range override {
		env[k] = v
	}
	cfg, err := parseConfig(args, envOf(env), io.Discard)
	require.NoError(t, err, "sagad %s with %v", strings.Join(args, " "), env)
	return cfg, args, env
}

// natsConfEnv is the environment compose gives a nats service: the role
// passwords and its name.
func natsConfEnv(t *testing.T, svc composeService) map[string]string {
	t.Helper()
	env := map[string]string{}
	for k, v := range svc.Environment {
		env[k] = resolve(v)
	}
	for _, role := range deployRoles {
		require.NotEmpty(t, env[PasswordEnv(role)], "no %s", PasswordEnv(role))
	}
	require.NotEmpty(t, env["SERVER_NAME"])
	return env
}

// TestComposeSagadArgs: both sagads of the compose file start with sagad's
// real flag set, on the three NATS nodes, as the sagad role, with 3
// replicas, scrapeable, and with the example executors.
func TestComposeSagadArgs(t *testing.T) {
	t.Parallel()
	services := readComposeFile(t)
	natsEnv := natsConfEnv(t, services["nats-1"])
	var sagads []string
	for name, svc := range services {
		if !strings.HasPrefix(name, "sagad-") {
			continue
		}
		sagads = append(sagads, name)
		cfg, _, _ := composeSagadConfig(t, svc, nil)
		require.Equal(t, 3, cfg.Replicas, name)
		var hosts []string
		for _, u := range strings.Split(cfg.URL, ",") {
			pu, err := url.Parse(u)
			require.NoError(t, err)
			require.Equal(t, "4222", pu.Port(), name)
			require.Contains(t, services, pu.Hostname(), "%s connects to %s, no compose service", name, u)
			hosts = append(hosts, pu.Hostname())
		}
		require.Equal(t, []string{"nats-1", "nats-2", "nats-3"}, hosts, name)
		require.Equal(t, RoleSagad, cfg.User, name)
		require.Equal(t, natsEnv[PasswordEnv(RoleSagad)], cfg.Password, "%s's password is the nats servers' sagad password", name)
		require.Equal(t, "0.0.0.0:9464", cfg.HTTPListen, name)
		require.True(t, cfg.Insecure, "%s: an HTTP listener off loopback needs --insecure", name)
		require.NoError(t, cfg.checkExposure())
		require.Contains(t, cfg.Executors, "demo", "%s reads examples/sagad.json", name)
		require.Equal(t, "/workspace", cfg.Workspace)
	}
	slices.Sort(sagads)
	require.Equal(t, []string{"sagad-1", "sagad-2"}, sagads)

	// The worker and sagactl connect as their roles, with the servers'
	// passwords.
	for name, role := range map[string]string{"worker-execute": "executor-demo", "worker-review": "reviewer-demo-reviewer", "sagactl": RoleOperator} {
		env := services[name].Environment
		require.Equal(t, role, env[natsconn.EnvUser], name)
		require.Equal(t, natsEnv[PasswordEnv(role)], resolve(env[natsconn.EnvPassword]), name)
	}
}

// TestComposeNATSConf: the compose nodes' configuration puts each role in
// the account sagad nats-config gives it (TestDeployAccountsGenerated keeps
// the accounts file the generator's) and makes one JetStream cluster of the
// three nodes. Not parallel: it sets environment variables.
func TestComposeNATSConf(t *testing.T) {
	services := readComposeFile(t)
	cfg, err := parseConfig([]string{"--config", exampleConfig}, envOf(nil), io.Discard)
	require.NoError(t, err)
	accounts, err := Accounts(cfg.accountSpec())
	require.NoError(t, err)
	accountOf := map[string]string{}
	for _, u := range UsersOf(accounts) {
		accountOf[u.Role] = u.Account
	}
	var names []string
	for _, node := range []string{"nats-1", "nats-2", "nats-3"} {
		for k, v := range natsConfEnv(t, services[node]) {
			t.Setenv(k, v)
		}
		opts, err := server.ProcessConfigFile(composeNATSConf)
		require.NoError(t, err)
		// The file nats.conf includes is mounted beside it.
		require.Contains(t, services[node].Volumes, "./nats/"+NATSAccountsFile+":/etc/nats/"+NATSAccountsFile+":ro", node)
		names = append(names, opts.ServerName)
		require.True(t, opts.JetStream)
		require.Equal(t, "/data", opts.StoreDir, "the volume compose mounts")
		require.Equal(t, time.Second, opts.SyncInterval)
		require.Equal(t, "saga", opts.Cluster.Name)
		require.Equal(t, 6222, opts.Cluster.Port)
		var routes []string
		for _, r := range opts.Routes {
			routes = append(routes, r.Host)
		}
		require.Equal(t, []string{"nats-1:6222", "nats-2:6222", "nats-3:6222"}, routes)
		require.Equal(t, 4222, opts.Port)
		require.Equal(t, 8222, opts.HTTPPort, "the compose health check asks :8222/healthz")

		require.Len(t, opts.Users, len(deployRoles))
		for _, u := range opts.Users {
			require.Equal(t, resolve(services[node].Environment[PasswordEnv(u.Username)]), u.Password)
			require.Equal(t, accountOf[u.Username], u.Account.Name, "%s's account", u.Username)
		}
	}
	require.Equal(t, []string{"nats-1", "nats-2", "nats-3"}, names)
}

// TestComposeClusterRunsCapsule runs the compose topology in-process: three
// nats-servers from deploy/compose/nats/nats.conf (addresses moved to free
// loopback ports), the two sagads from the compose file's arguments, a
// producer publishing as the producer role, sagad's own connection
// watching its checkpoint. The capsule completes and the streams have 3 replicas. Not
// parallel: it sets environment variables.
func TestComposeClusterRunsCapsule(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster and two sagads: not in -short")
	}
	services := readComposeFile(t)
	ports, err := freeports.FreePorts(6)
	require.NoError(t, err)
	clientPorts, routePorts := ports[:3], ports[3:]
	var routes []*url.URL
	for _, p := range routePorts {
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	var nodes []*server.Server
	var urls []string
	for i, node := range []string{"nats-1", "nats-2", "nats-3"} {
		for k, v := range natsConfEnv(t, services[node]) {
			t.Setenv(k, v)
		}
		opts, err := server.ProcessConfigFile(composeNATSConf)
		require.NoError(t, err)
		opts.Host, opts.Port = "127.0.0.1", clientPorts[i]
		opts.HTTPHost, opts.HTTPPort = "", 0
		opts.Cluster.Host, opts.Cluster.Port = "127.0.0.1", routePorts[i]
		opts.Routes = routes
		opts.StoreDir = t.TempDir()
		opts.NoLog, opts.NoSigs = true, true
		s, err := server.NewServer(opts)
		require.NoError(t, err)
		go s.Start()
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		require.True(t, s.ReadyForConnections(30*time.Second), node)
		nodes = append(nodes, s)
		urls = append(urls, s.ClientURL())
	}
	natstest.Eventually(t, 60*time.Second, 100*time.Millisecond, func() bool {
		return slices.ContainsFunc(nodes, (*server.Server).JetStreamIsLeader)
	}, "the compose cluster elected no JetStream meta leader")

	// The two sagads, each with the compose file's arguments on these nodes.
	for _, name := range []string{"sagad-1", "sagad-2"} {
		svc := services[name]
		svc.Command = slices.Clone(svc.Command)
		for i, a := range svc.Command {
			if strings.HasPrefix(a, "--nats-url=") {
				svc.Command[i] = "--nats-url=" + strings.Join(urls, ",")
			}
		}
		cfg, _, _ := composeSagadConfig(t, svc, map[string]string{
			"SAGAD_HTTP_LISTEN": "off", "SAGAD_LOG_LEVEL": "warn", "SAGAD_WORKSPACE": capsuletest.Workspace(t),
		})
		cfg.ShutdownTimeout = Duration(10 * time.Second)
		start(t, cfg)
	}

	as := func(role string) natsconn.Options {
		return natsconn.Options{URL: strings.Join(urls, ","), User: role, Password: os.Getenv(PasswordEnv(role))}
	}
	producer, err := as(RoleProducer).Connect()
	require.NoError(t, err)
	t.Cleanup(producer.Close)
	pjs, err := jetstream.New(producer)
	require.NoError(t, err)
	doc := capsuletest.New()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = pjs.Publish(ctx, "saga.intake", doc.Sealed(t))
	require.NoError(t, err)

	// sagad made its streams with 3 replicas, as told.
	sagadConn, err := as(RoleSagad).Connect()
	require.NoError(t, err)
	t.Cleanup(sagadConn.Close)
	sjs, err := jetstream.New(sagadConn)
	require.NoError(t, err)
	st, err := sjs.Stream(ctx, store.IntakeStream)
	require.NoError(t, err)
	require.Equal(t, 3, st.CachedInfo().Config.Replicas)
	kv, err := sjs.KeyValue(ctx, store.CheckpointsBucket)
	require.NoError(t, err)
	natstest.Eventually(t, 60*time.Second, 50*time.Millisecond, func() bool {
		e, err := kv.Get(ctx, doc.ID())
		return err == nil && bytes.Contains(e.Value(), []byte(`"status":"completed"`))
	}, "capsule %s never completed", doc.ID())
	status, err := kv.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, status.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas)
}
