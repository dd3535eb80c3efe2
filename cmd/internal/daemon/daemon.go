package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/health"
	"github.com/sagad/sagad/internal/buildinfo"
	"github.com/sagad/sagad/internal/logline"
	"github.com/sagad/sagad/internal/natsconn"
	"github.com/sagad/sagad/internal/tracing"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// Main runs sagad with the process's arguments and environment until SIGINT
// or SIGTERM and returns the exit code: 0 after a clean shutdown, 1 on a
// runtime failure, 2 on bad flags or configuration (also existing streams
// and buckets whose settings differ from the flags). `sagad healthcheck
// [flags]` instead probes the /readyz of the sagad those flags configure
// (0 ready, 1 not).
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == HealthcheckCommand {
		return healthcheck(args[1:], os.Getenv, stdout, stderr)
	}
	if len(args) > 0 && args[0] == NATSConfigCommand {
		return natsConfig(args[1:], os.Getenv, stdout, stderr)
	}
	cfg, err := parseConfig(args, os.Getenv, stderr)
	if errors.Is(err, errHelp) {
		return 0
	}
	if errors.Is(err, errVersion) {
		fmt.Fprintln(stdout, buildinfo.String("sagad"))
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "sagad:", err)
		if isUsageError(err) {
			fmt.Fprintln(stderr, usageHint("sagad"))
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, cfg, stderr, nil); err != nil {
		fmt.Fprintln(stderr, "sagad:", err)
		// Streams that differ from the flags are a configuration to
		// change, as a bad flag is: a restart (systemd's
		// RestartPreventExitStatus=2) would not mend it.
		var drift *store.DriftError
		if errors.As(err, &drift) {
			return 2
		}
		return 1
	}
	return 0
}

// Ready is told the NATS client URL once sagad is up (tests use it).
type Ready func(natsURL string)

// Run runs sagad until ctx is cancelled, then shuts down gracefully.
func Run(ctx context.Context, cfg Config, logOut io.Writer, onReady Ready) error {
	log := newLogger(cfg, logOut)
	for _, w := range cfg.warnings {
		log.Warn(w)
	}
	if err := cfg.checkExposure(); err != nil {
		return err
	}
	if err := cfg.checkConsole(); err != nil {
		return err
	}
	for _, l := range cfg.exposed() {
		log.Warn("listening off loopback without TLS (--insecure): anyone on the network can read and send what this listener carries", "listener", l)
	}
	// Everything that can make sagad exit on its own configuration is
	// checked before anything in NATS is changed: the HTTP listener is
	// bound first (it also answers /readyz while sagad waits for NATS).
	httpSrv, gate, err := listenHTTP(cfg, log)
	if err != nil {
		return err
	}
	if httpSrv != nil {
		// On a failed start; after a clean one Shutdown has run already.
		defer httpSrv.Close()
	}
	ep, err := natsEndpoint(cfg, log)
	if err != nil {
		return err
	}
	defer ep.close()
	// Until sagad serves, it waits for NATS and for a cluster able to hold
	// its streams, bounded by --start-timeout if set.
	startCtx, cancelStart := ctx, context.CancelFunc(func() {})
	if cfg.StartTimeout > 0 {
		startCtx, cancelStart = context.WithTimeoutCause(ctx, time.Duration(cfg.StartTimeout), errStartTimeout)
	}
	defer cancelStart()
	st := &starter{log: log, gate: gate, timeout: time.Duration(cfg.StartTimeout)}
	nc, err := connectNATS(startCtx, st, ep, log)
	if err != nil {
		return startErr(ctx, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	reg, m, err := newRegistry(js, log)
	if err != nil {
		return err
	}
	// With the embedded server, or logged in as the generated sagad user,
	// the agents live in the generated accounts.
	execs, err := cfg.buildExecutors(nc, ep.ns != nil || filepath.Base(ep.conn.NKey) == RoleSagad+natsconn.SeedExt)
	if err != nil {
		return err
	}
	if err := execs.CheckAgents(startCtx); err != nil {
		return err
	}
	cfg.warnUnpriced(log)
	mon := newMonitor(cfg, log, m)
	defer mon.Stop()
	tp, stopTracing, err := startTracing(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	pcfg := cfg.pipelineConfig(log, execs, m, tp, mon)
	if gate != nil {
		gate.wait("creating the JetStream streams and buckets")
	}
	p, err := startPipeline(startCtx, st, js, pcfg)
	if err != nil {
		return startErr(ctx, err)
	}
	svcs, err := startServices(ctx, nc, p, execs.AgentDirectory(), log, m, cfg.executorsConfig())
	if err != nil {
		return err
	}
	defer svcs.stopCompose(log)
	var ready atomic.Bool
	ready.Store(true)
	var ui *uiServer
	if gate != nil {
		if ui, err = serveHTTP(ctx, cfg, log, gate, nc, js, reg, &ready, mon, p); err != nil {
			_ = svcs.admin.Stop(ctx)
			p.Stop(ctx)
			return err
		}
	}
	if onReady != nil {
		onReady(ep.readyURL)
	}
	<-ctx.Done()

	log.Info("shutting down", "timeout", time.Duration(cfg.ShutdownTimeout))
	ready.Store(false)
	shutdown(cfg, log, svcs, p, ui, httpSrv, nc)
	return nil
}

// serveHTTP turns the start gate into sagad's HTTP API (metrics, health)
// and, unless --no-ui, the console.
func serveHTTP(ctx context.Context, cfg Config, log *slog.Logger, gate *startGate, nc *nats.Conn, js jetstream.JetStream,
	reg *prometheus.Registry, ready *atomic.Bool, mon *health.Monitor, p *pipeline.Pipeline) (*uiServer, error) {
	handler := httpHandler(nc, js, reg, ready, mon)
	var ui *uiServer
	if !cfg.NoUI {
		var err error
		if ui, err = startConsole(ctx, cfg, log, nc, p.Store(), p.Calls(), handler); err != nil {
			return nil, err
		}
		handler = ui.mux
	}
	gate.serve(handler)
	return ui, nil
}

// shutdown stops what Run started, within --shutdown-timeout: the admin
// service and the pipeline first (their work in flight ends or is left to
// redelivery), then the console's event streams (which would hold the HTTP
// server's Shutdown), the HTTP server, and what is buffered for NATS.
func shutdown(cfg Config, log *slog.Logger, svcs *services, p *pipeline.Pipeline, ui *uiServer, httpSrv *http.Server, nc *nats.Conn) {
	sctx, scancel := context.WithTimeout(context.Background(), time.Duration(cfg.ShutdownTimeout))
	defer scancel()
	if err := svcs.admin.Stop(sctx); err != nil {
		log.Warn("admin service stop", "error", err)
	}
	p.Stop(sctx)
	if ui != nil {
		ui.Stop()
	}
	if httpSrv != nil {
		_ = httpSrv.Shutdown(sctx)
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		log.Warn("flush", "error", err)
	}
}

// listenHTTP binds --http-listen and serves the start gate on it (its
// /readyz answers while sagad waits for NATS); nil, nil when it is off.
func listenHTTP(cfg Config, log *slog.Logger) (*http.Server, *startGate, error) {
	if cfg.HTTPListen == "" {
		return nil, nil, nil
	}
	ln, err := net.Listen("tcp", cfg.HTTPListen)
	if err != nil {
		return nil, nil, fmt.Errorf("http listen: %w", err)
	}
	gate := newStartGate()
	httpSrv := &http.Server{Handler: gate, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = httpSrv.Serve(ln) }()
	log.Info("http listening", "addr", ln.Addr().String())
	return httpSrv, gate, nil
}

// endpoint is the NATS sagad connects to: the configured one, or the
// embedded server it started.
type endpoint struct {
	conn     natsconn.Options
	extra    []nats.Option
	readyURL string
	ns       *server.Server
}

func (e *endpoint) close() {
	if e.ns != nil {
		e.ns.Shutdown()
		e.ns.WaitForShutdown()
	}
}

// natsEndpoint starts the embedded server when no NATS URL is configured.
func natsEndpoint(cfg Config, log *slog.Logger) (*endpoint, error) {
	ep := &endpoint{conn: cfg.Options, readyURL: cfg.Options.URL}
	if ep.conn.URL != "" {
		return ep, nil
	}
	ns, err := startEmbedded(cfg)
	if err != nil {
		return nil, err
	}
	ep.ns = ns
	ep.conn = natsconn.Options{URL: ns.ClientURL(), NKey: filepath.Join(CredsDir(cfg.DataDir), RoleSagad+natsconn.SeedExt)}
	ep.readyURL = ns.ClientURL()
	if cfg.ServerTLSCert != "" {
		// sagad talks to its own server in-process: no TLS to set up
		// for itself, and no network. The URL only names the server
		// then; a tls:// one would make the client ask for TLS.
		ep.conn.URL = "nats://" + strings.TrimPrefix(ns.ClientURL(), "tls://")
		ep.extra = append(ep.extra, nats.InProcessServer(ns))
	}
	log.Info("embedded nats-server started", "url", ns.ClientURL(), "data_dir", cfg.DataDir, "sync", cfg.Sync,
		"creds", CredsDir(cfg.DataDir))
	return ep, nil
}

// connectNATS connects to ep, waiting (through st) until it answers, and
// checks the server's version.
func connectNATS(ctx context.Context, st *starter, ep *endpoint, log *slog.Logger) (*nats.Conn, error) {
	var nc *nats.Conn
	err := st.retry(ctx, "NATS", func(context.Context) error {
		var err error
		nc, err = ep.conn.Connect(append(ep.extra, nats.Name("sagad"), nats.MaxReconnects(-1),
			nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
				if err != nil { // nil: our own Close at shutdown
					log.Warn("nats disconnected", "url", natsconn.Redact(nc.ConnectedUrl()), "error", err)
				}
			}),
			nats.ReconnectHandler(func(nc *nats.Conn) {
				log.Info("nats reconnected", "url", natsconn.Redact(nc.ConnectedUrl()))
			}),
		)...)
		return err
	})
	if err != nil {
		return nil, err
	}
	log.Info("nats connected", "url", natsconn.Redact(nc.ConnectedUrl()), "server_version", nc.ConnectedServerVersion())
	if ok, err := checkServerVersion(nc.ConnectedServerVersion()); err != nil {
		nc.Close()
		return nil, fmt.Errorf("%s: %w", natsconn.Redact(nc.ConnectedUrl()), err)
	} else if !ok {
		log.Warn("cannot read the nats-server's version; sagad needs "+MinServerVersion+" or later", "server_version", nc.ConnectedServerVersion())
	}
	return nc, nil
}

// startTracing sets OpenTelemetry up (off unless an endpoint is given);
// stop flushes the spans still batched.
func startTracing(ctx context.Context, cfg Config, log *slog.Logger) (trace.TracerProvider, func(), error) {
	tp, stopTracing, err := tracing.Setup(ctx, cfg.OTelEndpoint, buildinfo.Version(), os.Getenv)
	if err != nil {
		return nil, nil, err
	}
	stop := func() {
		// Within a bound of its own: the shutdown's may be spent.
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stopTracing(fctx); err != nil {
			log.Warn("tracing: flush on shutdown", "error", err)
		}
	}
	if on, why := tracing.Enabled(cfg.OTelEndpoint, os.Getenv); on {
		tracing.LogErrors(log)
		log.Info("tracing on (OpenTelemetry, OTLP/HTTP)", "endpoint", cmp.Or(cfg.OTelEndpoint, os.Getenv(tracing.EnvTracesEndpoint), os.Getenv(tracing.EnvEndpoint)))
	} else {
		log.Debug("tracing off", "why", why)
	}
	return tp, stop, nil
}

// pipelineConfig is the pipeline's part of cfg.
func (cfg Config) pipelineConfig(log *slog.Logger, execs *executors.Registry, m *metrics.Metrics, tp trace.TracerProvider, mon *health.Monitor) pipeline.Config {
	return pipeline.Config{
		Logger:              log,
		Workspace:           cfg.Workspace,
		KVBuckets:           cfg.KVBuckets,
		Workers:             cfg.Workers,
		Replicas:            cfg.Replicas,
		Migrate:             cfg.Migrate,
		Executors:           execs,
		Metrics:             m,
		TracerProvider:      tp,
		LockWait:            time.Duration(cfg.LockWait),
		MaxDepth:            cfg.MaxDepth,
		ChildBudget:         cfg.ChildBudget,
		BudgetWarning:       cfg.BudgetWarning,
		InlineArtifactBytes: cfg.InlineArtifactBytes,
		DeadlineWarning:     time.Duration(cfg.DeadlineWarning),
		ExternalTimeout:     time.Duration(cfg.ExternalTimeout),
		RescueAfter:         time.Duration(cfg.RescueAfter),
		DependencyTimeout:   time.Duration(cfg.DependencyTimeout),
		Retention:           cfg.retention(),
		WriteTimeout:        time.Duration(cfg.WriteTimeout),
		Health:              mon,
		Rules:               cfg.rulesConfig(execs.Kinds(), execs.ReviewerIDs()),
		IntakeQuota:         store.IntakeQuota{MaxPending: cfg.IntakeMaxPending, MaxMsgBytes: cfg.IntakeMaxMsgBytes, MaxBytes: cfg.IntakeMaxBytes},
		IntakeRate:          pipeline.IntakeRate{Msgs: cfg.IntakeRateMsgs, Bytes: cfg.IntakeRateBytes},
	}
}

// startPipeline makes the topology and starts the pipeline, waiting
// (through st) for a cluster able to hold its streams.
func startPipeline(ctx context.Context, st *starter, js jetstream.JetStream, pcfg pipeline.Config) (*pipeline.Pipeline, error) {
	var p *pipeline.Pipeline
	err := st.retry(ctx, "JetStream topology", func(ctx context.Context) error {
		// No deadline of its own: each JetStream request is then bounded
		// by the client's default (5s), so a cluster that cannot answer
		// yet is told at once rather than at the end of a long bound;
		// shutdown and the start timeout still cancel it.
		actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		defer context.AfterFunc(ctx, cancel)()
		var err error
		if p, err = pipeline.New(actx, js, pcfg); err != nil {
			return err
		}
		if err = p.Start(actx); err != nil {
			p.Stop(actx)
		}
		return err
	})
	return p, err
}

// services are the NATS services every sagad runs beside its pipeline.
type services struct {
	admin    *adminsvc.Service
	composer *compose.Service
	runner   *compose.Runner
}

// startServices starts them: every sagad serves the admin API (so
// sagactl's actions run, and are counted, in whichever sagad answers),
// composes chains (the steps' ids are sagad's to give) and records
// compositions' step ends (one durable consumer, shared: each run's
// record, events and one outcome). On an error the pipeline is stopped.
// execs is the config's executors, reviewers and models: its models judge
// a composition step's task.model, its models without a price are named
// by cost reports, and its report (no key or header) answers
// saga.admin.models.
func startServices(ctx context.Context, nc *nats.Conn, p *pipeline.Pipeline, dir *executors.AgentDirectory, log *slog.Logger, m *metrics.Metrics, execs executors.Config) (*services, error) {
	models, unpriced, report := execs.Models, execs.UnpricedModels(), execs.ModelsReport()
	agents := agentsListing(nc, dir, log)
	admin, err := adminsvc.Start(nc, p.Admin(), adminsvc.Config{Logger: log, Rules: p.Rules(), Chains: adminsvc.StoreChains(p.Store()), Calls: p.Calls(),
		Costs: adminsvc.WithUnpriced(adminsvc.StoreCosts(p.Store()), unpriced), Compositions: adminsvc.StoreCompositions(p.Store(), p.Admin()), Agents: agents,
		Models: &report})
	if err != nil {
		p.Stop(ctx)
		return nil, err
	}
	composer, err := compose.Start(nc, p.Store(), compose.Config{Logger: log, Rules: p.Rules(), Models: models, Started: m.CompositionStarted})
	if err != nil {
		_ = admin.Stop(ctx)
		p.Stop(ctx)
		return nil, err
	}
	compRunner, err := compose.StartRunner(ctx, p.Store(), compose.RunnerConfig{Logger: log, Metrics: m})
	if err != nil {
		if err := composer.Stop(); err != nil {
			log.Warn("compose service stop", "error", err)
		}
		_ = admin.Stop(ctx)
		p.Stop(ctx)
		return nil, err
	}
	return &services{admin: admin, composer: composer, runner: compRunner}, nil
}

// stopCompose stops the composition runner and service (the admin service
// stops first, with the pipeline, at shutdown).
func (s *services) stopCompose(log *slog.Logger) {
	s.runner.Stop()
	if err := s.composer.Stop(); err != nil {
		log.Warn("compose service stop", "error", err)
	}
}

// startErr is Run's answer to a start that did not finish: nil when
// sagad was asked to stop while it waited (a clean shutdown), else err.
func startErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func startEmbedded(cfg Config) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(cfg.NATSListen)
	if err != nil {
		return nil, fmt.Errorf("nats-listen %q: %w", cfg.NATSListen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("nats-listen %q: bad port", cfg.NATSListen)
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	// Every client authenticates, with the NKey of its role, into the
	// account of its role (accounts.go).
	conf, _, err := GenerateAccounts(cfg.accountSpec(), CredsDir(dir))
	if err != nil {
		return nil, err
	}
	opts := &server.Options{}
	if err := opts.ProcessConfigString(conf); err != nil {
		return nil, fmt.Errorf("embedded nats-server accounts: %w", err)
	}
	opts.ServerName = "sagad-embedded"
	opts.Host, opts.Port = host, port
	opts.JetStream, opts.StoreDir = true, dir
	opts.NoSigs, opts.NoLog = true, true
	if err := ApplySync(opts, cfg.Sync); err != nil {
		return nil, err
	}
	if cfg.ServerTLSCert != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{
			CertFile: cfg.ServerTLSCert, KeyFile: cfg.ServerTLSKey, CaFile: cfg.ServerTLSCA, Verify: cfg.ServerTLSCA != "",
		})
		if err != nil {
			return nil, fmt.Errorf("embedded server TLS: %w", err)
		}
		opts.TLSConfig, opts.TLS, opts.TLSVerify = tc, true, cfg.ServerTLSCA != ""
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(15 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded nats-server did not start on %s (port in use? try --nats-listen)", cfg.NATSListen)
	}
	return ns, nil
}

// newLogger is sagad's logger: text or JSON lines at the configured level.
func newLogger(cfg Config, out io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	// logline writes slog's own text and JSON lines, faster: a line per
	// transition is on the hot path. JSON durations are written as the
	// text line writes them, "1.5s", not as a bare count of nanoseconds.
	o := logline.Options{Level: level}
	if cfg.LogFormat == "json" {
		o.DurationsAsText = true
		return slog.New(logline.NewJSON(out, o))
	}
	return slog.New(logline.NewText(out, o))
}

// newRegistry builds the registry /metrics serves: Go and process
// collectors, sagad's recorder (returned for the pipeline) and the JetStream
// collector.
func newRegistry(js jetstream.JetStream, log *slog.Logger) (*prometheus.Registry, *metrics.Metrics, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg, metrics.BuildInfo{})
	col, err := metrics.NewJetStreamCollector(js, metrics.CollectorConfig{
		Names: metrics.Names{
			PhaseStream:         store.PhaseStream,
			ConsumerName:        store.ConsumerName,
			ContinuationsBucket: store.ContinuationsBucket,
			CompositionsBucket:  store.CompositionsBucket,
		},
		CompositionState: compose.StateOfBytes,
		Timeout:          readyTimeout,
		Logger:           log,
		AwaitingOperator: m.AwaitingOperatorCount,
	})
	if err != nil {
		return nil, nil, err
	}
	reg.MustRegister(col)
	return reg, m, nil
}

// readyTimeout bounds the JetStream reads of one /readyz check (and of one
// scrape's JetStream collector).
const readyTimeout = 2 * time.Second

func httpHandler(nc *nats.Conn, js jetstream.JetStream, reg *prometheus.Registry, ready *atomic.Bool, mon *health.Monitor) http.Handler {
	mux := http.NewServeMux()
	// OpenMetrics when the scraper asks for it: the latency histograms'
	// exemplars (trace ids) travel only in that format.
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := checkReady(r.Context(), nc, js, ready, mon); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	return mux
}

// checkReady: the pipeline's consumers run (ready), NATS is connected,
// JetStream answers for the intake stream and the checkpoint bucket, its
// writes succeed and no phase is stalled (mon).
func checkReady(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, ready *atomic.Bool, mon *health.Monitor) error {
	if !ready.Load() {
		return errors.New("pipeline not running")
	}
	if !nc.IsConnected() {
		return fmt.Errorf("nats %s", nc.Status())
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if _, err := js.Stream(ctx, store.IntakeStream); err != nil {
		return fmt.Errorf("stream %s: %w", store.IntakeStream, err)
	}
	if _, err := js.KeyValue(ctx, store.CheckpointsBucket); err != nil {
		return fmt.Errorf("bucket %s: %w", store.CheckpointsBucket, err)
	}
	return mon.Check(ctx, js)
}

// newMonitor watches sagad's JetStream writes and its phase consumers.
func newMonitor(cfg Config, log *slog.Logger, m *metrics.Metrics) *health.Monitor {
	var cons []health.Consumer
	for ph := capsule.Phase(0); ph < capsule.NumPhases; ph++ {
		cons = append(cons, health.Consumer{
			Stream: store.PhaseStream(ph), Name: store.ConsumerName(ph), Label: fmt.Sprintf("phase %d %s", int(ph), ph),
		})
	}
	return health.New(health.Config{
		UnhealthyAfter: time.Duration(cfg.UnhealthyAfter),
		StallAfter:     time.Duration(cfg.StallAfter),
		Consumers:      cons,
		Logger:         log,
		Metrics:        m,
	})
}

// agentsListing is what saga.admin.agents lists. With agent endpoints
// configured it is their directory: it reaches the agents through each
// role's imports (on the embedded server no agent is in sagad's account)
// and knows which kinds each serves. Without any, the agents' discovery and
// heartbeats are watched on sagad's own connection, for an outside server
// where agents share its account.
func agentsListing(nc *nats.Conn, dir *executors.AgentDirectory, log *slog.Logger) adminsvc.AgentDirectory {
	if dir != nil {
		return directoryAgents{dir}
	}
	w, err := adminsvc.WatchAgents(nc, adminsvc.AgentWatchConfig{Logger: log})
	if err != nil {
		log.Warn("agents' heartbeats not watched: sagactl agents lists no agent", "error", err)
		return nil
	}
	return w
}

// directoryAgents lists an [executors.AgentDirectory]'s instances as the
// admin service shows them.
type directoryAgents struct{ d *executors.AgentDirectory }

func (a directoryAgents) Agents(ctx context.Context, wait time.Duration) ([]adminsvc.AgentInfo, error) {
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait+time.Second)
		defer cancel()
	}
	insts, err := a.d.List(ctx)
	out := make([]adminsvc.AgentInfo, 0, len(insts))
	for _, in := range insts {
		info := adminsvc.AgentInfo{
			Agent: in.Agent, Owner: in.Owner, Session: in.Session, ProtocolVersion: in.ProtocolVersion,
			InstanceID: in.ID, PromptSubject: in.PromptSubject, Discovered: true, Alive: in.Alive,
			IntervalS: int(in.Interval / time.Second), Serves: serves(in.Kinds),
		}
		if !in.LastBeat.IsZero() {
			at := in.LastBeat
			info.LastHeartbeat = &at
		}
		out = append(out, info)
	}
	return out, err
}

// serves is the directory's kinds ("<kind>", "reviewer:<id>") as the
// admin service names them: "executor:<kind>", "reviewer:<id>".
func serves(kinds []string) []string {
	if len(kinds) == 0 {
		return nil
	}
	out := make([]string, len(kinds))
	for i, k := range kinds {
		if strings.HasPrefix(k, "reviewer:") {
			out[i] = k
		} else {
			out[i] = "executor:" + k
		}
	}
	return out
}
