package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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

// Config is everything sagad can be told. Precedence: flags given on the
// command line, then environment variables (SAGAD_* only: the SAGA_* ones
// are sagactl's, and sagad at most warns that they are set), then the
// config file, then defaults.
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
	// Models are the model tiers and prices of the model endpoints and of
	// task.model (config file only; docs/MODELS.md).
	Models executors.Models `json:"models"`
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

	// warnings are what parsing found worth saying but not refusing (a
	// SAGA_* variable ignored, a setting a flag overrode); Run logs each
	// at WARN once its logger exists.
	warnings []string
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
		return fmt.Errorf("%w: http-listen %s: set --ui-token (SAGAD_UI_TOKEN) or --ui-basic-auth user:password (SAGAD_UI_BASIC_AUTH), or turn the console off with --no-ui", ErrConsoleAuth, c.HTTPListen)
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
