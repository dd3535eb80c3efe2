package sagatest

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// Bundle is one test's embedded server with sagad's topology, and what the
// test drives it with.
type Bundle struct {
	Server *server.Server
	NC     *nats.Conn
	JS     jetstream.JetStream
	// Store is the store on the topology ([store.Ensure] by [Setup],
	// the pipeline's by [Run]).
	Store  *store.Store
	Client *client.Client
	Logger *slog.Logger
	// Workspace holds go.mod and README.md (capsuletest.Workspace).
	Workspace string

	// Executors registers "stub", "slow" (each run waits for a value on
	// Gate) and "accepting" (answers accepted; AcceptedToken keeps the
	// completion token of its latest call). Executed counts their runs.
	Executors     *executors.Registry
	Executed      *atomic.Int64
	Gate          chan struct{}
	AcceptedToken *atomic.Pointer[string]

	// Config and Pipeline are the running pipeline's, after [Run].
	Config   pipeline.Config
	Pipeline *pipeline.Pipeline
}

// Setup starts a server, makes sagad's topology on it and opens the store
// and a client; no pipeline runs.
func Setup(t *testing.T) *Bundle {
	t.Helper()
	b := newBundle(t)
	st, err := store.Ensure(context.Background(), b.JS, store.Topology{Workspace: b.Workspace, Logger: b.Logger})
	require.NoError(t, err)
	b.open(t, st)
	return b
}

// Run starts a server and a pipeline on the bundle's stub executors, which
// makes the topology its configuration asks for; change, when non-nil,
// changes that configuration first.
func Run(t *testing.T, change func(*pipeline.Config)) *Bundle {
	t.Helper()
	b := newBundle(t)
	b.Config = Config(t, b.Workspace, b.Executors)
	if change != nil {
		change(&b.Config)
	}
	b.Pipeline = b.Start(t, b.Config)
	st, err := store.Open(context.Background(), b.JS)
	require.NoError(t, err)
	b.open(t, st)
	return b
}

func newBundle(t *testing.T) *Bundle {
	t.Helper()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)
	b := &Bundle{
		Server: s, NC: nc, JS: js,
		Logger:        Logger(t),
		Workspace:     capsuletest.Workspace(t),
		Executors:     executors.NewRegistry(),
		Executed:      new(atomic.Int64),
		Gate:          make(chan struct{}),
		AcceptedToken: new(atomic.Pointer[string]),
	}
	b.Executors.RegisterExecutor("stub", CountingStub{N: b.Executed})
	b.Executors.RegisterExecutor("slow", CountingStub{N: b.Executed, Gate: b.Gate})
	b.Executors.RegisterExecutor("accepting", AcceptingStub{N: b.Executed, Token: b.AcceptedToken})
	return b
}

func (b *Bundle) open(t *testing.T, st *store.Store) {
	t.Helper()
	b.Store = st
	c, err := client.NewClient(context.Background(), b.JS)
	require.NoError(t, err)
	b.Client = c
}

// Config is the pipeline configuration of [Run]: fast heartbeats and
// retries so tests move quickly, and warnings logged to t.Log.
func Config(t testing.TB, workspace string, reg *executors.Registry) pipeline.Config {
	return pipeline.Config{
		Logger:     Logger(t),
		Workspace:  workspace,
		Workers:    4,
		AckWait:    2 * time.Second,
		Heartbeat:  300 * time.Millisecond,
		RetryDelay: 50 * time.Millisecond,
		Executors:  reg,
	}
}

// Start starts a pipeline with cfg on the bundle's server (another process
// of the same deployment, or a restart), stopped at the test's end.
func (b *Bundle) Start(t *testing.T, cfg pipeline.Config) *pipeline.Pipeline {
	t.Helper()
	ctx := context.Background()
	p, err := pipeline.New(ctx, b.JS, cfg)
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	return p
}

// Admin opens the operator's actions on the bundle's topology. Its phase
// pauses reach the pipeline's pause view through the server's advisory, as
// another sagad's do; the pipeline's own Admin (sagad's admin service) is
// seen at once.
func (b *Bundle) Admin(t *testing.T) *admin.Admin {
	t.Helper()
	a, err := admin.Open(context.Background(), b.JS)
	require.NoError(t, err)
	return a
}

// Publish submits capsule bytes through the client.
func (b *Bundle) Publish(t *testing.T, raw []byte) {
	t.Helper()
	_, err := b.Client.Publish(context.Background(), raw, "")
	require.NoError(t, err)
}

// Wait polls until the capsule has left in_progress and waiting, and
// returns its status.
func (b *Bundle) Wait(t *testing.T, id string) client.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var s client.Status
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		var err error
		s, err = b.Client.Status(ctx, id)
		return err == nil && s.State != capsule.InProgress && s.State != capsule.Waiting
	}, "capsule %s never left in_progress (or waiting)", id)
	return s
}

// WaitState polls until the capsule is in state s.
func (b *Bundle) WaitState(t *testing.T, id string, s capsule.State) client.Status {
	t.Helper()
	var st client.Status
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		var err error
		st, err = b.Client.Status(context.Background(), id)
		return err == nil && st.State == s
	}, "capsule %s never reached %s (last %s at %s)", id, s, st.State, st.PhaseName)
	return st
}

// WaitCheckpoint polls the checkpoint of key until ok holds, and returns it.
func (b *Bundle) WaitCheckpoint(t *testing.T, key string, ok func(*capsule.Checkpoint) bool) *capsule.Checkpoint {
	t.Helper()
	var cp *capsule.Checkpoint
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		got, _, err := b.Store.Checkpoints.Get(context.Background(), key)
		if err != nil {
			return false
		}
		cp = got
		return ok(cp)
	}, "checkpoint %s never reached the state awaited", key)
	return cp
}

// Own gives the capsule a target and lock of its own, so capsules of one
// test do not contend for locks.
func (b *Bundle) Own(t *testing.T, d capsuletest.Doc) capsuletest.Doc {
	t.Helper()
	name := "own-" + d.ID() + ".txt"
	require.NoError(t, os.WriteFile(filepath.Join(b.Workspace, name), []byte("x"), 0o644))
	return d.Set("target", "file:"+name).Set("constraints.resource_locks_required", []any{name})
}

// Counter reads the counter name from reg: the series whose label is value,
// or the sum of every series when label is "".
func Counter(t testing.TB, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			if label == "" {
				sum += s.GetCounter().GetValue()
				continue
			}
			for _, l := range s.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return s.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// Logger logs warnings and errors to t.Log.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tlogWriter struct{ t testing.TB }

func (w tlogWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

// LeakOptions are the goleak options of a package whose tests run a
// pipeline: nats.go's ObjectStore.Put (the pipeline's artifacts) can leave
// this goroutine blocked, an upstream race, not ours.
func LeakOptions() []goleak.Option {
	return []goleak.Option{goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect")}
}
