package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sagad/sagad/console"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/internal/natsconn"
	"github.com/sagad/sagad/internal/tracing"
	"github.com/sagad/sagad/phases"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/rules"
)

// Config is everything sagad can be told. Precedence: flags, then
// environment variables (SAGAD_*, and SAGA_* for the connection settings
// sagactl shares), then the config file, then defaults.
type Config struct {
	// Options connect to an external NATS system (the nats_* and tls_* keys
	// of the config file; see package natsconn). An empty URL starts the
	// embedded server instead.
	natsconn.Options
	// NATSListen is the embedded server's client address. Defaults to 127.0.0.1:4222.
	NATSListen string `json:"nats_listen"`
	// ServerTLSCert and ServerTLSKey are the embedded server's certificate
	// and key (PEM): with them it accepts only TLS clients. Needed to listen
	// off loopback without Insecure.
	ServerTLSCert string `json:"server_tls_cert"`
	ServerTLSKey  string `json:"server_tls_key"`
	// ServerTLSCA, if set, makes the embedded server require client
	// certificates signed by these CAs (mutual TLS).
	ServerTLSCA string `json:"server_tls_ca"`
	// Insecure allows the embedded server to listen off loopback without
	// TLS, and the HTTP listener to listen off loopback at all (it has no
	// TLS); sagad logs a warning. Defaults to false.
	Insecure bool `json:"insecure"`
	// DataDir holds the embedded server's JetStream files. Defaults to ./data.
	DataDir string `json:"data_dir"`
	// Workspace is the root of file: refs. Defaults to the current directory.
	Workspace string `json:"workspace"`
	// KVBuckets lists the KV buckets kv: refs may name (config file only);
	// a ref to any other bucket never resolves. Defaults to none.
	KVBuckets []string `json:"kv_buckets"`
	// HTTPListen serves /healthz, /readyz and /metrics; "" disables it.
	// Defaults to [DefaultHTTPListen].
	HTTPListen string `json:"http_listen"`
	// NoUI turns off the web console sagad serves at /ui/ on HTTPListen.
	// Defaults to false: the console is on.
	NoUI bool `json:"no_ui"`
	// UIToken, if set, is required by the console (README "The console"):
	// open /ui/?token=<token> once, or send Authorization: Bearer <token>.
	// Off loopback, UIToken or UIBasicAuth is required.
	UIToken string `json:"ui_token"`
	// UIBasicAuth, if set ("user:password"), is required by the console as
	// HTTP basic auth.
	UIBasicAuth string `json:"ui_basic_auth"`
	// LogFormat is "text" or "json". Defaults to text.
	LogFormat string `json:"log_format"`
	// LogLevel is debug, info, warn or error. Defaults to info.
	LogLevel string `json:"log_level"`
	// Workers per phase. Defaults to 32.
	Workers int `json:"workers"`
	// IntakeMaxPending is how many intake messages one producer may have
	// waiting for RECEPTION; past it JetStream refuses its publishes.
	// Defaults to 256 (store.DefaultIntakeMaxPending).
	IntakeMaxPending int64 `json:"intake_max_pending,omitempty"`
	// IntakeMaxMsgBytes bounds one intake message. Defaults to 1 MiB.
	IntakeMaxMsgBytes int32 `json:"intake_max_msg_bytes,omitempty"`
	// IntakeMaxBytes bounds everything waiting in the intake, all
	// producers together. Defaults to unbounded (JetStream reserves it
	// from the server's storage).
	IntakeMaxBytes int64 `json:"intake_max_bytes,omitempty"`
	// InlineArtifactBytes is the largest artifact content an executor
	// request carries inline (a revision's prior artifact, context
	// artifacts); a larger one the worker fetches by reference on
	// saga.artifacts.get. Defaults to 256 KiB.
	InlineArtifactBytes int64 `json:"inline_artifact_bytes,omitempty"`
	// IntakeRateMsgs is how many capsules a second RECEPTION takes from one
	// producer (per sagad); more wait in the intake. Negative: unlimited.
	// Defaults to 200.
	IntakeRateMsgs float64 `json:"intake_rate_msgs,omitempty"`
	// IntakeRateBytes is how many intake bytes a second RECEPTION takes
	// from one producer (per sagad). Negative: unlimited. Defaults to 4 MiB.
	IntakeRateBytes float64 `json:"intake_rate_bytes,omitempty"`
	// MaxDepth is how deep capsules published by executor calls
	// (parent_capsule_id) may nest; deeper halts depth_exceeded:<depth>.
	// Defaults to 4.
	MaxDepth int `json:"max_depth,omitempty"`
	// ChildBudget is what a child capsule whose caps do not fit what its
	// parent's caps have left does: "halt" (budget_exceeded:parent_tokens
	// before any call) or "wait" (trigger parent_capacity, until a
	// sibling's end frees room). Defaults to halt (docs/DELEGATION.md).
	ChildBudget string `json:"child_budget,omitempty"`
	// Replicas of streams and buckets (3 on a JetStream cluster). Defaults to 1.
	Replicas int `json:"replicas"`
	// Migrate lets sagad change existing streams and buckets whose settings
	// (replicas, retention...) differ from this configuration. Without it
	// sagad refuses to start, naming each difference and the flag that
	// would match, and changes nothing. Defaults to false.
	Migrate bool `json:"migrate"`
	// StartTimeout bounds how long sagad waits at start for its NATS to
	// answer and for a cluster able to hold its streams, then exits with
	// the last cause. Defaults to 0: wait as long as it takes.
	StartTimeout Duration `json:"start_timeout"`
	// ShutdownTimeout bounds graceful shutdown. Defaults to 30s.
	ShutdownTimeout Duration `json:"shutdown_timeout"`
	// Sync is the embedded server's fsync policy: "always" (every write,
	// before its ack; ≈10× slower), a duration (an acknowledged write is on
	// disk within it) or "default" (nats-server's 2 minutes). See README
	// "Durability". Defaults to 1s ([DefaultSync]).
	Sync string `json:"sync"`
	// LockWait is how long EXECUTION retries a lock held by another capsule
	// before parking with lock_contention; negative halts at once with
	// lock_acquisition_failed. Defaults to 60s.
	LockWait Duration `json:"lock_wait"`
	// BudgetWarning is the used fraction of a cap that pauses a capsule with
	// budget_warning; negative disables it. Defaults to 0.75.
	BudgetWarning float64 `json:"budget_warning"`
	// DeadlineWarning pauses a capsule with deadline_approaching when less
	// is left before its deadline; negative disables it. Defaults to 5m.
	DeadlineWarning Duration `json:"deadline_warning"`
	// ExternalTimeout halts a capsule whose accepted external work has not
	// reported within it. Defaults to 1h.
	ExternalTimeout Duration `json:"external_timeout"`
	// RescueAfter is how long a capsule in progress may go unchanged, its
	// phase's queue empty, before its step is sent again; negative disables
	// the rescuer. Defaults to 2m.
	RescueAfter Duration `json:"rescue_after"`
	// DependencyTimeout halts a capsule waiting for a dependency sagad does
	// not know after this long (dependency_missing). Defaults to 24h.
	DependencyTimeout Duration `json:"dependency_timeout"`
	// Retention is how long an ended capsule's checkpoint, bytes, events and
	// artifacts are kept after its outcome; negative keeps them forever.
	// Defaults to 168h (7 days).
	Retention Duration `json:"retention"`
	// WriteTimeout bounds each JetStream write, whatever time its phase has
	// left; a write that times out is retried later. Defaults to 5s.
	WriteTimeout Duration `json:"write_timeout"`
	// UnhealthyAfter is how long JetStream writes may keep failing before
	// sagad logs it at ERROR, raises sagad_jetstream_writes_failing and
	// fails /readyz. Defaults to 30s.
	UnhealthyAfter Duration `json:"unhealthy_after"`
	// StallAfter is how long a phase with pending work may make no progress
	// before /readyz reports it stalled. Defaults to 2m.
	StallAfter Duration `json:"stall_after"`
	// OTelEndpoint turns OpenTelemetry tracing on: spans go to this OTLP/HTTP
	// endpoint ("http://localhost:4318"). Without it tracing is on only when
	// OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT) is set, and off
	// whenever OTEL_SDK_DISABLED=true (README "Tracing (OpenTelemetry)").
	OTelEndpoint string `json:"otel_endpoint,omitempty"`
	// TraceURL links a capsule's trace id in the console to the tracing
	// backend: a URL template holding {trace_id}
	// ("http://jaeger:16686/trace/{trace_id}"). Defaults to none.
	TraceURL string `json:"trace_url,omitempty"`
	// Executors serve task kinds beyond the built-in "stub" (config file
	// only; see executors.Config and examples/sagad.json).
	Executors map[string]executors.Endpoint `json:"executors"`
	// Reviewers serve review.reviewer_agent_id values beyond the built-in
	// "stub-reviewer" (config file only).
	Reviewers map[string]executors.Endpoint `json:"reviewers"`
	// Producers names the producers beyond the default one ("producer"),
	// each a NATS account and seed file of its own on the embedded server
	// (producer-<name>.nk) and in `sagad nats-config` (config file only).
	Producers []string `json:"producers,omitempty"`
	// DefaultReviewer reviews the capsules that declare no
	// review.reviewer_agent_id: a key of Reviewers or "stub-reviewer"
	// (config file only). Defaults to none: such a capsule violates Rule 20.
	DefaultReviewer string `json:"default_reviewer,omitempty"`
	// Constitution sets the parameters of the rules (CONSTITUTION.md), e.g.
	// {"deny_paths": [".git", ".env", "secrets", "infra"], "max_dollars": 50};
	// absent members keep their defaults (config file only; see
	// rules.Config.UnmarshalJSON and README "Configuration"). The task kinds
	// and reviewer ids of Rule 22 follow from Executors and Reviewers.
	Constitution rules.Config `json:"constitution"`
}

// DefaultHTTPListen is the HTTP listener's default address. Not 9090:
// that is Prometheus's own port, and a Prometheus started beside sagad with
// its defaults would find it taken (README "Observability" says why 9464).
const DefaultHTTPListen = "127.0.0.1:9464"

// DefaultRetention is how long sagad keeps an ended capsule by default.
const DefaultRetention = 7 * 24 * time.Hour

// retention is the pipeline's Retention: the default when unset, 0 (keep
// forever) when negative.
func (c *Config) retention() time.Duration {
	switch {
	case c.Retention == 0:
		return DefaultRetention
	case c.Retention < 0:
		return 0
	}
	return time.Duration(c.Retention)
}

// Duration is a time.Duration that reads "30s" from JSON.
type Duration time.Duration

// UnmarshalJSON accepts a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

// MarshalJSON writes d as UnmarshalJSON reads it ("1m30s"), so a Config
// encodes to a config file that decodes to the same Config.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// decodeConfigFile reads a config file's bytes: one JSON object of Config's
// members, nothing unknown, nothing after it.
func decodeConfigFile(b []byte) (Config, error) {
	var f struct {
		Config
		// SyncAlways is the older spelling of "sync": "always".
		SyncAlways bool `json:"sync_always"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Config{}, err
	}
	if err := dec.Decode(&struct{}{}); err != io.EOF {
		return Config{}, errors.New("data after the JSON object")
	}
	cfg := f.Config
	if f.SyncAlways && cfg.Sync == "" {
		cfg.Sync = SyncAlways
	}
	return cfg, nil
}

func (c *Config) withDefaults() {
	if c.NATSListen == "" {
		c.NATSListen = "127.0.0.1:4222"
	}
	if c.DataDir == "" {
		c.DataDir = "data"
	}
	if c.Workspace == "" {
		c.Workspace = "."
	}
	if c.LogFormat == "" {
		c.LogFormat = "text"
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = Duration(30 * time.Second)
	}
	if c.Sync == "" {
		c.Sync = DefaultSync
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = Duration(jspub.DefaultTimeout)
	}
	if c.UnhealthyAfter == 0 {
		c.UnhealthyAfter = Duration(DefaultUnhealthyAfter)
	}
	if c.StallAfter == 0 {
		c.StallAfter = Duration(DefaultStallAfter)
	}
}

// Defaults of the health settings (package health).
const (
	DefaultUnhealthyAfter = 30 * time.Second
	DefaultStallAfter     = 2 * time.Minute
)

func (c *Config) validate() error {
	errs := []error{c.checkConsole(), pipeline.ValidateKVBuckets(c.KVBuckets)}
	if c.ChildBudget != "" && c.ChildBudget != pipeline.ChildBudgetHalt && c.ChildBudget != pipeline.ChildBudgetWait {
		errs = append(errs, fmt.Errorf("child budget %q: want halt or wait", c.ChildBudget))
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("log format %q: want text or json", c.LogFormat))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log level %q: want debug, info, warn or error", c.LogLevel))
	}
	if err := tracing.ValidateEndpoint(c.OTelEndpoint); err != nil {
		errs = append(errs, err)
	}
	if err := console.ValidateTraceURL(c.TraceURL); err != nil {
		errs = append(errs, err)
	}
	if c.MaxDepth < 0 {
		errs = append(errs, fmt.Errorf("max depth %d: must not be negative (0: the default, 4)", c.MaxDepth))
	}
	if c.Workers < 0 || c.Replicas < 0 {
		errs = append(errs, errors.New("workers and replicas must not be negative"))
	}
	if c.StartTimeout < 0 {
		errs = append(errs, errors.New("start timeout must not be negative (0 waits as long as it takes)"))
	}
	if c.WriteTimeout < 0 || c.UnhealthyAfter < 0 || c.StallAfter < 0 {
		errs = append(errs, errors.New("write timeout, unhealthy after and stall after must be positive"))
	}
	errs = append(errs, c.Options.Validate(), c.checkExposure())
	if (c.ServerTLSCert == "") != (c.ServerTLSKey == "") || (c.ServerTLSCA != "" && c.ServerTLSCert == "") {
		errs = append(errs, errors.New("server TLS: a certificate needs its key (and a CA needs a certificate)"))
	}
	errs = append(errs, ApplySync(&server.Options{}, c.Sync))
	errs = append(errs, c.executorsConfig().Validate())
	rc := c.rulesConfig(c.executorsConfig().Names()).WithDefaults()
	if err := rc.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("constitution: %w", err))
	}
	if rc.MaxCapsuleBytes > phases.DefaultMaxIntakeBytes {
		errs = append(errs, fmt.Errorf("constitution: max_capsule_bytes: %d is above sagad's intake limit of %d bytes", rc.MaxCapsuleBytes, phases.DefaultMaxIntakeBytes))
	}
	return errors.Join(errs...)
}

// errVersion is parseConfig's answer to --version: Main prints the build
// and exits 0, as with -h.
var errVersion = errors.New("version requested")

// parseFlags parses args into fs, printing fs's usage to stderr only for
// -h: the flag package would print a bad flag's error above sixty lines of
// usage, where it scrolls away. The caller prints the error on one line,
// with [usageHint] after it.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	usage := fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	fs.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return err
	case err != nil:
		return &usageError{err}
	}
	return nil
}

// usageError is a bad flag or argument: Main follows it with [usageHint].
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// isUsageError reports whether err is a bad flag or argument.
func isUsageError(err error) bool {
	var ue *usageError
	return errors.As(err, &ue)
}

// usageHint is the line after a usage error: the usage itself is one --help
// away.
func usageHint(cmd string) string {
	return fmt.Sprintf("Run '%s --help' for the flags.", cmd)
}

// parseConfig reads flags, SAGAD_* and SAGA_* env vars and the optional
// config file.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("sagad", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage of sagad:\n  sagad [flags]               run sagad\n"+
			"  sagad healthcheck [flags]   probe the /readyz of the sagad these flags and SAGAD_* configure: exit 0 if ready, 1 if not\n"+
			"  sagad nats-config --config FILE --out DIR   write the NATS accounts of the roles for an external nats-server\n")
		fs.PrintDefaults()
	}
	v := defineFlags(fs)
	if err := parseFlags(fs, args, stderr); err != nil {
		return Config{}, err
	}
	if *v.version {
		return Config{}, errVersion
	}
	if fs.NArg() > 0 {
		return Config{}, &usageError{fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))}
	}
	if err := v.convert(); err != nil {
		return Config{}, err
	}
	if v.file == "" {
		v.file = getenv("SAGAD_CONFIG")
	}
	var cfg Config
	if v.file != "" {
		b, err := os.ReadFile(v.file)
		if err != nil {
			return Config{}, fmt.Errorf("config file: %w", err)
		}
		if cfg, err = decodeConfigFile(b); err != nil {
			return Config{}, fmt.Errorf("config file %s: %w", v.file, err)
		}
	}
	// Environment over file.
	if errs := applyEnv(&cfg, getenv); len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	// Flags over everything.
	v.apply(fs, &cfg)
	if cfg.HTTPListen == "" {
		cfg.HTTPListen = DefaultHTTPListen
	}
	if cfg.HTTPListen == "off" {
		cfg.HTTPListen = ""
	}
	cfg.withDefaults()
	return cfg, cfg.validate()
}

// flagValues are sagad's flags as parsed, before they are laid over the
// file and the environment (only the flags given are).
type flagValues struct {
	file    string
	version *bool
	flags   Config
	// Flags whose type is not the Config field's.
	shutdown, startTimeout, lockWait, deadlineWarning, externalTimeout, retention, rescueAfter,
	writeTimeout, unhealthyAfter, stallAfter, dependencyTimeout time.Duration
	intakeMaxMsgBytes int
	syncAlways        bool
}

// defineFlags defines sagad's flags on fs.
func defineFlags(fs *flag.FlagSet) *flagValues {
	v := &flagValues{}
	fs.StringVar(&v.file, "config", "", "JSON config file (env SAGAD_CONFIG)")
	v.version = fs.Bool("version", false, "print the version, VCS revision and Go version, and exit")
	v.flags.Options.Bind(fs, "external NATS URL; empty starts the embedded server (or SAGAD_NATS_URL)")
	fs.StringVar(&v.flags.NATSListen, "nats-listen", "", "embedded server client address (default 127.0.0.1:4222; env SAGAD_NATS_LISTEN)")
	fs.StringVar(&v.flags.DataDir, "data-dir", "", "embedded server data directory (default ./data; env SAGAD_DATA_DIR)")
	fs.StringVar(&v.flags.Workspace, "workspace", "", "root of file: refs (default .; env SAGAD_WORKSPACE)")
	fs.StringVar(&v.flags.HTTPListen, "http-listen", "", "health and metrics address (default "+DefaultHTTPListen+", \"off\" disables; env SAGAD_HTTP_LISTEN)")
	fs.BoolVar(&v.flags.NoUI, "no-ui", false, "do not serve the web console at /ui/ (env SAGAD_NO_UI)")
	fs.StringVar(&v.flags.UIToken, "ui-token", "", "token the web console requires (open /ui/?token=T once); needed off loopback unless --ui-basic-auth (env SAGA_UI_TOKEN)")
	fs.StringVar(&v.flags.UIBasicAuth, "ui-basic-auth", "", "user:password the web console requires as HTTP basic auth (env SAGA_UI_BASIC_AUTH)")
	fs.StringVar(&v.flags.LogFormat, "log-format", "", "text or json (env SAGAD_LOG_FORMAT)")
	fs.StringVar(&v.flags.ChildBudget, "child-budget", "", "a child capsule whose caps do not fit what its parent's caps have left: halt (budget_exceeded:parent_tokens before any call) or wait (trigger parent_capacity) (default halt; env SAGAD_CHILD_BUDGET)")
	fs.StringVar(&v.flags.LogLevel, "log-level", "", "debug, info, warn, error (env SAGAD_LOG_LEVEL)")
	fs.IntVar(&v.flags.Workers, "workers", 0, "capsules worked on at once per phase (default 64, which is also the most agent calls a phase makes at once; env SAGAD_WORKERS)")
	fs.Int64Var(&v.flags.IntakeMaxPending, "intake-max-pending", 0, "intake messages one producer may have waiting; past it its publishes are refused (default 256; env SAGAD_INTAKE_MAX_PENDING)")
	fs.IntVar(&v.intakeMaxMsgBytes, "intake-max-msg-bytes", 0, "largest intake message, headers included (default 1048576; env SAGAD_INTAKE_MAX_MSG_BYTES)")
	fs.Int64Var(&v.flags.IntakeMaxBytes, "intake-max-bytes", 0, "bytes waiting in the intake, all producers together, reserved from JetStream's storage (default unbounded; env SAGAD_INTAKE_MAX_BYTES)")
	fs.Int64Var(&v.flags.InlineArtifactBytes, "inline-artifact-bytes", 0, "largest artifact content sent inside an executor request; larger ones are fetched by reference on saga.artifacts.get (default 262144; env SAGAD_INLINE_ARTIFACT_BYTES)")
	fs.Float64Var(&v.flags.IntakeRateMsgs, "intake-rate-msgs", 0, "capsules a second RECEPTION takes from one producer; more wait in the intake; negative: unlimited (default 200; env SAGAD_INTAKE_RATE_MSGS)")
	fs.Float64Var(&v.flags.IntakeRateBytes, "intake-rate-bytes", 0, "intake bytes a second RECEPTION takes from one producer; negative: unlimited (default 4194304; env SAGAD_INTAKE_RATE_BYTES)")
	fs.IntVar(&v.flags.MaxDepth, "max-depth", 0, "how deep capsules published by executor calls (parent_capsule_id) may nest; deeper halts depth_exceeded:<depth> (default 4; env SAGAD_MAX_DEPTH)")
	fs.IntVar(&v.flags.Replicas, "replicas", 0, "stream and bucket replicas (default 1; env SAGAD_REPLICAS)")
	fs.BoolVar(&v.flags.Migrate, "migrate", false, "change existing streams and buckets whose settings (replicas, retention...) differ from these flags; without it sagad refuses to start and changes nothing (env SAGAD_MIGRATE)")
	fs.DurationVar(&v.startTimeout, "start-timeout", 0, "exit if NATS or a cluster able to hold the streams is not there within this long (default 0: wait as long as it takes; env SAGAD_START_TIMEOUT)")
	fs.DurationVar(&v.shutdown, "shutdown-timeout", 0, "graceful shutdown bound (default 30s; env SAGAD_SHUTDOWN_TIMEOUT)")
	fs.StringVar(&v.flags.Sync, "sync", "", "embedded server's fsync: always (before every ack), 1s (default: acknowledged writes on disk within 1s), default (the server's 2m) or another duration (env SAGAD_SYNC)")
	fs.StringVar(&v.flags.ServerTLSCert, "server-tls-cert", "", "embedded server's TLS certificate (PEM); with it, clients must use TLS (env SAGAD_SERVER_TLS_CERT)")
	fs.StringVar(&v.flags.ServerTLSKey, "server-tls-key", "", "embedded server's TLS key (PEM) (env SAGAD_SERVER_TLS_KEY)")
	fs.StringVar(&v.flags.ServerTLSCA, "server-tls-ca", "", "embedded server requires client certificates signed by these CAs (env SAGAD_SERVER_TLS_CA)")
	fs.BoolVar(&v.flags.Insecure, "insecure", false, "allow listening off loopback without TLS (embedded NATS, HTTP); logs a warning (env SAGAD_INSECURE)")
	fs.BoolVar(&v.syncAlways, "sync-always", false, "alias of --sync always (env SAGAD_SYNC_ALWAYS)")
	fs.DurationVar(&v.lockWait, "lock-wait", 0, "retry contended locks this long, then park with lock_contention; negative halts at once (default 60s; env SAGAD_LOCK_WAIT)")
	fs.Float64Var(&v.flags.BudgetWarning, "budget-warning", 0, "pause with budget_warning past this fraction of a cap; negative disables (default 0.75; env SAGAD_BUDGET_WARNING)")
	fs.DurationVar(&v.deadlineWarning, "deadline-warning", 0, "pause with deadline_approaching when less is left; negative disables (default 5m; env SAGAD_DEADLINE_WARNING)")
	fs.DurationVar(&v.externalTimeout, "external-timeout", 0, "halt when accepted external work reports nothing for this long (default 1h; env SAGAD_EXTERNAL_TIMEOUT)")
	fs.DurationVar(&v.dependencyTimeout, "dependency-timeout", 0, "halt a capsule waiting this long for a dependency sagad does not know (dependency_missing) (default 24h; env SAGAD_DEPENDENCY_TIMEOUT)")
	fs.DurationVar(&v.rescueAfter, "rescue-after", 0, "send again the step of a capsule in progress unchanged this long with nothing queued for its phase; negative disables (default 2m; env SAGAD_RESCUE_AFTER)")
	fs.DurationVar(&v.retention, "retention", 0, "keep ended capsules this long, then remove their state (outcomes stay); negative keeps them forever (default 168h; env SAGAD_RETENTION)")
	fs.DurationVar(&v.writeTimeout, "write-timeout", 0, "bound of each JetStream write; one that times out is retried later (default 5s; env SAGAD_WRITE_TIMEOUT)")
	fs.DurationVar(&v.unhealthyAfter, "unhealthy-after", 0, "JetStream writes failing this long make sagad unhealthy: ERROR log, sagad_jetstream_writes_failing 1, /readyz 503 (default 30s; env SAGAD_UNHEALTHY_AFTER)")
	fs.DurationVar(&v.stallAfter, "stall-after", 0, "/readyz reports a phase with pending work and no progress for this long (default 2m; env SAGAD_STALL_AFTER)")
	fs.StringVar(&v.flags.OTelEndpoint, "otel-endpoint", "", "send OpenTelemetry traces to this OTLP/HTTP endpoint, e.g. http://localhost:4318 (default off, or OTEL_EXPORTER_OTLP_ENDPOINT; env SAGAD_OTEL_ENDPOINT)")
	fs.StringVar(&v.flags.TraceURL, "trace-url", "", "link the console's trace ids to a tracing backend: a URL template holding {trace_id}, e.g. http://jaeger:16686/trace/{trace_id} (env SAGAD_TRACE_URL)")
	return v
}

// convert puts the flags whose type is not their field's into v.flags.
func (v *flagValues) convert() error {
	v.flags.ShutdownTimeout = Duration(v.shutdown)
	v.flags.StartTimeout = Duration(v.startTimeout)
	if v.intakeMaxMsgBytes > math.MaxInt32 || v.intakeMaxMsgBytes < 0 {
		return fmt.Errorf("--intake-max-msg-bytes %d: out of range", v.intakeMaxMsgBytes)
	}
	v.flags.IntakeMaxMsgBytes = int32(v.intakeMaxMsgBytes)
	v.flags.LockWait, v.flags.DeadlineWarning, v.flags.ExternalTimeout = Duration(v.lockWait), Duration(v.deadlineWarning), Duration(v.externalTimeout)
	v.flags.Retention = Duration(v.retention)
	v.flags.RescueAfter = Duration(v.rescueAfter)
	v.flags.DependencyTimeout = Duration(v.dependencyTimeout)
	v.flags.WriteTimeout, v.flags.UnhealthyAfter, v.flags.StallAfter = Duration(v.writeTimeout), Duration(v.unhealthyAfter), Duration(v.stallAfter)
	return nil
}

// applyEnv lays the environment (SAGA_* and SAGAD_*) over cfg, and returns
// every variable that does not parse.
func applyEnv(cfg *Config, getenv func(string) string) []error {
	applyEnvStrings(cfg, getenv)
	return append(applyEnvNumbers(cfg, getenv), applyEnvSwitches(cfg, getenv)...)
}

// applyEnvStrings lays the variables that are strings over cfg.
func applyEnvStrings(cfg *Config, getenv func(string) string) {
	envStr := func(dst *string, name string) {
		if v := getenv(name); v != "" {
			*dst = v
		}
	}
	// The connection settings sagactl shares (SAGA_*), then sagad's own
	// older names for two of them, which win as the more specific.
	cfg.Options = cfg.Options.Merge(natsconn.FromEnv(getenv))
	envStr(&cfg.URL, "SAGAD_NATS_URL")
	envStr(&cfg.Creds, "SAGAD_NATS_CREDS")
	envStr(&cfg.NATSListen, "SAGAD_NATS_LISTEN")
	envStr(&cfg.ServerTLSCert, "SAGAD_SERVER_TLS_CERT")
	envStr(&cfg.ServerTLSKey, "SAGAD_SERVER_TLS_KEY")
	envStr(&cfg.ServerTLSCA, "SAGAD_SERVER_TLS_CA")
	envStr(&cfg.DataDir, "SAGAD_DATA_DIR")
	envStr(&cfg.Workspace, "SAGAD_WORKSPACE")
	envStr(&cfg.HTTPListen, "SAGAD_HTTP_LISTEN")
	envStr(&cfg.UIToken, "SAGA_UI_TOKEN")
	envStr(&cfg.UIToken, "SAGAD_UI_TOKEN")
	envStr(&cfg.UIBasicAuth, "SAGA_UI_BASIC_AUTH")
	envStr(&cfg.UIBasicAuth, "SAGAD_UI_BASIC_AUTH")
	envStr(&cfg.LogFormat, "SAGAD_LOG_FORMAT")
	envStr(&cfg.ChildBudget, "SAGAD_CHILD_BUDGET")
	envStr(&cfg.LogLevel, "SAGAD_LOG_LEVEL")
	envStr(&cfg.OTelEndpoint, "SAGAD_OTEL_ENDPOINT")
	envStr(&cfg.TraceURL, "SAGAD_TRACE_URL")
}

// applyEnvNumbers lays the variables that are numbers and durations over
// cfg.
func applyEnvNumbers(cfg *Config, getenv func(string) string) []error {
	var errs []error
	envInt := func(dst *int, name string) {
		if v := getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
			*dst = n
		}
	}
	envInt(&cfg.Workers, "SAGAD_WORKERS")
	envInt(&cfg.Replicas, "SAGAD_REPLICAS")
	envInt(&cfg.MaxDepth, "SAGAD_MAX_DEPTH")
	envInt64 := func(dst *int64, name string, bits int) {
		if v := getenv(name); v != "" {
			n, err := strconv.ParseInt(v, 10, bits)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
			*dst = n
		}
	}
	envInt64(&cfg.IntakeMaxPending, "SAGAD_INTAKE_MAX_PENDING", 64)
	envInt64(&cfg.IntakeMaxBytes, "SAGAD_INTAKE_MAX_BYTES", 64)
	envInt64(&cfg.InlineArtifactBytes, "SAGAD_INLINE_ARTIFACT_BYTES", 64)
	if v := getenv("SAGAD_INTAKE_MAX_MSG_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			errs = append(errs, fmt.Errorf("SAGAD_INTAKE_MAX_MSG_BYTES: %w", err))
		}
		cfg.IntakeMaxMsgBytes = int32(n)
	}
	if v := getenv("SAGAD_SHUTDOWN_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("SAGAD_SHUTDOWN_TIMEOUT: %w", err))
		}
		cfg.ShutdownTimeout = Duration(d)
	}
	envDur := func(dst *Duration, name string) {
		if v := getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
			*dst = Duration(d)
		}
	}
	envDur(&cfg.LockWait, "SAGAD_LOCK_WAIT")
	envDur(&cfg.DeadlineWarning, "SAGAD_DEADLINE_WARNING")
	envDur(&cfg.ExternalTimeout, "SAGAD_EXTERNAL_TIMEOUT")
	envDur(&cfg.Retention, "SAGAD_RETENTION")
	envDur(&cfg.RescueAfter, "SAGAD_RESCUE_AFTER")
	envDur(&cfg.DependencyTimeout, "SAGAD_DEPENDENCY_TIMEOUT")
	envDur(&cfg.WriteTimeout, "SAGAD_WRITE_TIMEOUT")
	envDur(&cfg.UnhealthyAfter, "SAGAD_UNHEALTHY_AFTER")
	envDur(&cfg.StallAfter, "SAGAD_STALL_AFTER")
	envDur(&cfg.StartTimeout, "SAGAD_START_TIMEOUT")
	envFloat := func(dst *float64, name string) {
		if v := getenv(name); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
			*dst = f
		}
	}
	envFloat(&cfg.IntakeRateMsgs, "SAGAD_INTAKE_RATE_MSGS")
	envFloat(&cfg.IntakeRateBytes, "SAGAD_INTAKE_RATE_BYTES")
	if v := getenv("SAGAD_BUDGET_WARNING"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("SAGAD_BUDGET_WARNING: %w", err))
		}
		cfg.BudgetWarning = f
	}
	return errs
}

// applyEnvSwitches lays the variables that are booleans (and the sync
// policy, which the sync_always alias changes) over cfg.
func applyEnvSwitches(cfg *Config, getenv func(string) string) []error {
	var errs []error
	envStr := func(dst *string, name string) {
		if v := getenv(name); v != "" {
			*dst = v
		}
	}
	if v := getenv("SAGAD_SYNC_ALWAYS"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("SAGAD_SYNC_ALWAYS: %w", err))
		}
		cfg.Sync = syncAlias(cfg.Sync, b)
	}
	envStr(&cfg.Sync, "SAGAD_SYNC")
	if v := getenv("SAGAD_INSECURE"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("SAGAD_INSECURE: %w", err))
		}
		cfg.Insecure = b
	}
	if v := getenv("SAGAD_MIGRATE"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("SAGAD_MIGRATE: %w", err))
		}
		cfg.Migrate = b
	}
	if v := getenv("SAGAD_NO_UI"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("SAGAD_NO_UI: %w", err))
		}
		cfg.NoUI = b
	}
	return errs
}

// apply lays the flags given on fs over cfg.
func (v *flagValues) apply(fs *flag.FlagSet, cfg *Config) {
	cfg.Options = cfg.Options.Merge(v.flags.Options)
	fs.Visit(func(f *flag.Flag) {
		if set, ok := flagSetters[f.Name]; ok {
			set(v, cfg)
		}
	})
}

// flagSetters lay one flag given on the command line over cfg, by its name
// (the connection flags of Options are merged whole by apply).
var flagSetters = map[string]func(v *flagValues, cfg *Config){
	// --nats-url "" chooses the embedded server over any URL.
	"nats-url":              func(v *flagValues, cfg *Config) { cfg.URL = v.flags.URL },
	"nats-listen":           func(v *flagValues, cfg *Config) { cfg.NATSListen = v.flags.NATSListen },
	"server-tls-cert":       func(v *flagValues, cfg *Config) { cfg.ServerTLSCert = v.flags.ServerTLSCert },
	"server-tls-key":        func(v *flagValues, cfg *Config) { cfg.ServerTLSKey = v.flags.ServerTLSKey },
	"server-tls-ca":         func(v *flagValues, cfg *Config) { cfg.ServerTLSCA = v.flags.ServerTLSCA },
	"insecure":              func(v *flagValues, cfg *Config) { cfg.Insecure = v.flags.Insecure },
	"data-dir":              func(v *flagValues, cfg *Config) { cfg.DataDir = v.flags.DataDir },
	"workspace":             func(v *flagValues, cfg *Config) { cfg.Workspace = v.flags.Workspace },
	"http-listen":           func(v *flagValues, cfg *Config) { cfg.HTTPListen = v.flags.HTTPListen },
	"no-ui":                 func(v *flagValues, cfg *Config) { cfg.NoUI = v.flags.NoUI },
	"ui-token":              func(v *flagValues, cfg *Config) { cfg.UIToken = v.flags.UIToken },
	"ui-basic-auth":         func(v *flagValues, cfg *Config) { cfg.UIBasicAuth = v.flags.UIBasicAuth },
	"log-format":            func(v *flagValues, cfg *Config) { cfg.LogFormat = v.flags.LogFormat },
	"child-budget":          func(v *flagValues, cfg *Config) { cfg.ChildBudget = v.flags.ChildBudget },
	"log-level":             func(v *flagValues, cfg *Config) { cfg.LogLevel = v.flags.LogLevel },
	"workers":               func(v *flagValues, cfg *Config) { cfg.Workers = v.flags.Workers },
	"replicas":              func(v *flagValues, cfg *Config) { cfg.Replicas = v.flags.Replicas },
	"max-depth":             func(v *flagValues, cfg *Config) { cfg.MaxDepth = v.flags.MaxDepth },
	"intake-max-pending":    func(v *flagValues, cfg *Config) { cfg.IntakeMaxPending = v.flags.IntakeMaxPending },
	"intake-max-msg-bytes":  func(v *flagValues, cfg *Config) { cfg.IntakeMaxMsgBytes = v.flags.IntakeMaxMsgBytes },
	"intake-max-bytes":      func(v *flagValues, cfg *Config) { cfg.IntakeMaxBytes = v.flags.IntakeMaxBytes },
	"inline-artifact-bytes": func(v *flagValues, cfg *Config) { cfg.InlineArtifactBytes = v.flags.InlineArtifactBytes },
	"intake-rate-msgs":      func(v *flagValues, cfg *Config) { cfg.IntakeRateMsgs = v.flags.IntakeRateMsgs },
	"intake-rate-bytes":     func(v *flagValues, cfg *Config) { cfg.IntakeRateBytes = v.flags.IntakeRateBytes },
	"shutdown-timeout":      func(v *flagValues, cfg *Config) { cfg.ShutdownTimeout = v.flags.ShutdownTimeout },
	"start-timeout":         func(v *flagValues, cfg *Config) { cfg.StartTimeout = v.flags.StartTimeout },
	"migrate":               func(v *flagValues, cfg *Config) { cfg.Migrate = v.flags.Migrate },
	"sync":                  func(v *flagValues, cfg *Config) { cfg.Sync = v.flags.Sync },
	"sync-always":           func(v *flagValues, cfg *Config) { cfg.Sync = syncAlias(cfg.Sync, v.syncAlways) },
	"lock-wait":             func(v *flagValues, cfg *Config) { cfg.LockWait = v.flags.LockWait },
	"budget-warning":        func(v *flagValues, cfg *Config) { cfg.BudgetWarning = v.flags.BudgetWarning },
	"deadline-warning":      func(v *flagValues, cfg *Config) { cfg.DeadlineWarning = v.flags.DeadlineWarning },
	"external-timeout":      func(v *flagValues, cfg *Config) { cfg.ExternalTimeout = v.flags.ExternalTimeout },
	"retention":             func(v *flagValues, cfg *Config) { cfg.Retention = v.flags.Retention },
	"rescue-after":          func(v *flagValues, cfg *Config) { cfg.RescueAfter = v.flags.RescueAfter },
	"dependency-timeout":    func(v *flagValues, cfg *Config) { cfg.DependencyTimeout = v.flags.DependencyTimeout },
	"write-timeout":         func(v *flagValues, cfg *Config) { cfg.WriteTimeout = v.flags.WriteTimeout },
	"unhealthy-after":       func(v *flagValues, cfg *Config) { cfg.UnhealthyAfter = v.flags.UnhealthyAfter },
	"stall-after":           func(v *flagValues, cfg *Config) { cfg.StallAfter = v.flags.StallAfter },
	"otel-endpoint":         func(v *flagValues, cfg *Config) { cfg.OTelEndpoint = v.flags.OTelEndpoint },
	"trace-url":             func(v *flagValues, cfg *Config) { cfg.TraceURL = v.flags.TraceURL },
}

// syncAlias is the sync policy after the alias sync_always = on: true means
// always; false undoes an always from a lower layer (back to the default)
// and leaves any other policy alone.
func syncAlias(policy string, on bool) string {
	switch {
	case on:
		return SyncAlways
	case policy == SyncAlways:
		return ""
	}
	return policy
}

// ErrInsecureListen: a listener off loopback without TLS, refused unless
// Config.Insecure. Credentials and capsules would cross the network in
// plain text.
var ErrInsecureListen = errors.New("listening off loopback without TLS")

// checkExposure refuses plain-text listeners off loopback unless Insecure.
func (c *Config) checkExposure() error {
	if c.Insecure {
		return nil
	}
	var errs []error
	if c.URL == "" && c.ServerTLSCert == "" && !loopback(c.NATSListen) {
		errs = append(errs, fmt.Errorf("%w: nats-listen %s: give the embedded server a certificate (--server-tls-cert, --server-tls-key) or accept plain text with --insecure", ErrInsecureListen, c.NATSListen))
	}
	if c.HTTPListen != "" && !loopback(c.HTTPListen) {
		errs = append(errs, fmt.Errorf("%w: http-listen %s: the HTTP listener has no TLS; keep it on loopback behind a proxy, or accept plain text with --insecure", ErrInsecureListen, c.HTTPListen))
	}
	return errors.Join(errs...)
}

// ErrConsoleAuth: the console would be served off loopback with no
// authentication.
var ErrConsoleAuth = errors.New("the web console needs authentication off loopback")

// checkConsole refuses an open console off loopback, and a malformed
// basic auth.
func (c *Config) checkConsole() error {
	if c.HTTPListen == "" || c.NoUI {
		return nil
	}
	if c.UIBasicAuth != "" {
		if u, p, ok := strings.Cut(c.UIBasicAuth, ":"); !ok || u == "" || p == "" {
			return fmt.Errorf("ui-basic-auth: want user:password with a non-empty user and password")
		}
	}
	if c.UIToken != "" && len(c.UIToken) < console.MinTokenLen {
		return fmt.Errorf("ui-token: %d bytes is short enough to guess; use at least %d (e.g. the output of openssl rand -hex 32)", len(c.UIToken), console.MinTokenLen)
	}
	if !loopback(c.HTTPListen) && c.UIToken == "" && c.UIBasicAuth == "" {
		return fmt.Errorf("%w: http-listen %s: set --ui-token (SAGA_UI_TOKEN) or --ui-basic-auth user:password (SAGA_UI_BASIC_AUTH), or turn the console off with --no-ui", ErrConsoleAuth, c.HTTPListen)
	}
	return nil
}

// exposed lists the plain-text listeners off loopback (allowed by Insecure).
func (c *Config) exposed() []string {
	var l []string
	if c.URL == "" && c.ServerTLSCert == "" && !loopback(c.NATSListen) {
		l = append(l, "nats "+c.NATSListen)
	}
	if c.HTTPListen != "" && !loopback(c.HTTPListen) {
		l = append(l, "http "+c.HTTPListen)
	}
	return l
}

// loopback reports whether a listen address (host:port) stays on this
// machine: localhost or a loopback IP. An empty host or 0.0.0.0 listens
// everywhere; a malformed address is left for the listener to refuse.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return true
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
