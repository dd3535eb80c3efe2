package daemon

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sagad/sagad/internal/natsconn"
)

// errVersion is parseConfig's answer to --version: Main prints the build
// and exits 0, as with -h.
var errVersion = errors.New("version requested")

// errHelp is parseConfig's answer to -h: the help is printed, Main exits 0.
var errHelp = pflag.ErrHelp

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

// sagadHelp is what `sagad --help` says above the flags.
const sagadHelp = `sagad drives capsules through the seven-phase saga on NATS JetStream.

Usage:
  sagad [flags]                              run sagad
  sagad healthcheck [flags]                  probe the /readyz of the sagad these flags and SAGAD_* configure: exit 0 if ready, 1 if not
  sagad nats-config --config FILE --out DIR  write the NATS accounts of the roles for an external nats-server

Every flag has an environment variable, SAGAD_ and its name in capitals
(--nats-url: SAGAD_NATS_URL). A flag given wins over its variable, which wins
over the config file (--config), which wins over the defaults. The SAGA_*
variables are sagactl's: sagad ignores them and says so.`

// parseConfig reads flags, SAGAD_* variables and the optional config file:
// a flag given on the command line over its variable over the file over the
// defaults. The flags are parsed twice: once to find --config, -h, --version
// and errors, and once more onto the configuration the file and the
// environment made, so that only the flags given change it.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	p := newSagadCommand(stderr)
	args = longFlags(p.cmd.Flags(), args)
	p.cmd.SetArgs(args)
	if err := p.cmd.Execute(); err != nil {
		if !isUsageError(err) {
			err = &usageError{err}
		}
		return Config{}, err
	}
	switch {
	case p.version:
		return Config{}, errVersion
	case !p.ran:
		return Config{}, errHelp
	}
	file, fs := p.file, p.cmd.Flags()
	if file == "" {
		file = getenv("SAGAD_CONFIG")
	}
	cfg, err := readConfigFile(file)
	if err != nil {
		return Config{}, err
	}
	src := natsSourcesOf(cfg, getenv)
	// cfg's own flags; --config and --version, read already, land nowhere.
	layers := pflag.NewFlagSet("sagad", pflag.ContinueOnError)
	layers.String("config", "", "")
	layers.Bool("version", false, "")
	fromFile := cfg
	bindSettings(layers, &cfg) // defining a flag writes its default: undone below
	cfg = fromFile
	// Environment over file.
	if err := applyEnv(layers, &cfg, getenv); err != nil {
		return Config{}, err
	}
	// Flags over everything: the same arguments, parsed once already.
	if err := layers.Parse(args); err != nil {
		return Config{}, &usageError{err}
	}
	src.urlFlag, src.listenFlag = fs.Changed("nats-url"), fs.Changed("nats-listen")
	warnings, err := chooseNATS(&cfg, src)
	if err != nil {
		return Config{}, err
	}
	cfg.warnings = append(envWarnings(getenv), warnings...)
	switch cfg.HTTPListen {
	case "":
		cfg.HTTPListen = DefaultHTTPListen
	case "off":
		cfg.HTTPListen = ""
	}
	cfg.withDefaults()
	return cfg, cfg.validate()
}

// sagadCommand is sagad's command line, parsed: the flags given land in
// given, which only tells them apart from those absent.
type sagadCommand struct {
	cmd          *cobra.Command
	given        Config
	file         string
	version, ran bool
}

// newSagadCommand is the cobra command that parses sagad's flags and prints
// its help (to stderr, as Go's flag package did).
func newSagadCommand(stderr io.Writer) *sagadCommand {
	p := &sagadCommand{}
	p.cmd = &cobra.Command{
		Use:           "sagad [flags]",
		Long:          sagadHelp,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return &usageError{fmt.Errorf("unexpected arguments: %s", strings.Join(args, " "))}
			}
			return nil
		},
		Run: func(*cobra.Command, []string) { p.ran = true },
	}
	p.cmd.SetOut(stderr)
	p.cmd.SetErr(stderr)
	p.cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	p.cmd.SetHelpTemplate("{{.Long}}\n\nFlags:\n{{.LocalFlags.FlagUsages}}")
	fs := p.cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&p.file, "config", "", "JSON config file (env SAGAD_CONFIG)")
	fs.BoolVar(&p.version, "version", false, "print the version, VCS revision and Go version, and exit")
	bindSettings(fs, &p.given)
	return p
}

// readConfigFile decodes the config file at path; "" is no file.
func readConfigFile(path string) (Config, error) {
	if path == "" {
		return Config{}, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config file: %w", err)
	}
	cfg, err := decodeConfigFile(b)
	if err != nil {
		return Config{}, fmt.Errorf("config file %s: %w", path, err)
	}
	return cfg, nil
}

// longFlags rewrites -name to --name for every long flag fs defines: Go's
// flag package, which parsed sagad's flags before pflag, took both, and
// scripts written then keep working. Anything else (a shorthand, a value
// such as -1s, what follows --) is left alone.
func longFlags(fs *pflag.FlagSet, args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if a == "--" {
			copy(out[i:], args[i:])
			break
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			name, _, _ := strings.Cut(a[1:], "=")
			if len(name) > 1 && fs.Lookup(name) != nil {
				out[i] = "-" + a
			}
		}
	}
	return out
}

// envName is the variable of flag name: SAGAD_ and the name in capitals.
func envName(flag string) string {
	return natsconn.DaemonEnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyEnv lays the SAGAD_* variables over cfg through fs (cfg's flags):
// each flag's variable, set and not empty, is parsed as the flag would be.
// sync-always goes first, so that SAGAD_SYNC, the newer name, wins over it.
// It returns every variable that does not parse.
func applyEnv(fs *pflag.FlagSet, cfg *Config, getenv func(string) string) error {
	// The older names first: the newer, read below, win.
	for old, flag := range renamedEnv {
		if v := getenv(old); v != "" {
			_ = fs.Set(flag, v) // strings: cannot fail
		}
	}
	var errs []error
	set := func(f *pflag.Flag) {
		if f.Name == "config" || f.Name == "version" {
			return
		}
		name := envName(f.Name)
		if v := getenv(name); v != "" {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	}
	set(fs.Lookup("sync-always"))
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name != "sync-always" {
			set(f)
		}
	})
	// The secrets have no flag (a flag shows in ps): only a variable.
	if v := getenv(natsconn.EnvName(natsconn.EnvPassword, natsconn.DaemonEnvPrefix)); v != "" {
		cfg.Password = v
	}
	if v := getenv(natsconn.EnvName(natsconn.EnvToken, natsconn.DaemonEnvPrefix)); v != "" {
		cfg.Token = v
	}
	return errors.Join(errs...)
}

// bindSettings defines a flag on fs for each of cfg's settings that has one.
func bindSettings(fs *pflag.FlagSet, cfg *Config) {
	cfg.Options.BindEnv(fs, "outside NATS URL(s), comma-separated; not with --nats-listen; empty starts the embedded server", natsconn.DaemonEnvPrefix)
	fs.StringVar(&cfg.NATSListen, "nats-listen", "", "embedded server client address; not with --nats-url (default 127.0.0.1:4222; env SAGAD_NATS_LISTEN)")
	fs.StringVar(&cfg.DataDir, "data-dir", "", "embedded server data directory (default ./data; env SAGAD_DATA_DIR)")
	fs.StringVar(&cfg.Workspace, "workspace", "", "root of file: refs (default .; env SAGAD_WORKSPACE)")
	fs.StringVar(&cfg.HTTPListen, "http-listen", "", "health and metrics address (default "+DefaultHTTPListen+", \"off\" disables; env SAGAD_HTTP_LISTEN)")
	fs.BoolVar(&cfg.NoUI, "no-ui", false, "do not serve the web console at /ui/ (env SAGAD_NO_UI)")
	fs.StringVar(&cfg.UIToken, "ui-token", "", "token the web console requires (open /ui/?token=T once); needed off loopback unless --ui-basic-auth (env SAGAD_UI_TOKEN)")
	fs.StringVar(&cfg.UIBasicAuth, "ui-basic-auth", "", "user:password the web console requires as HTTP basic auth (env SAGAD_UI_BASIC_AUTH)")
	fs.StringVar(&cfg.LogFormat, "log-format", "", "text or json (env SAGAD_LOG_FORMAT)")
	fs.StringVar(&cfg.ChildBudget, "child-budget", "", "a child capsule whose caps do not fit what its parent's caps have left: halt (budget_exceeded:parent_tokens before any call) or wait (trigger parent_capacity) (default halt; env SAGAD_CHILD_BUDGET)")
	fs.StringVar(&cfg.LogLevel, "log-level", "", "debug, info, warn, error (env SAGAD_LOG_LEVEL)")
	fs.IntVar(&cfg.Workers, "workers", 0, "capsules worked on at once per phase (default 64, which is also the most agent calls a phase makes at once; env SAGAD_WORKERS)")
	fs.Int64Var(&cfg.IntakeMaxPending, "intake-max-pending", 0, "intake messages one producer may have waiting; past it its publishes are refused (default 256; env SAGAD_INTAKE_MAX_PENDING)")
	fs.Int32Var(&cfg.IntakeMaxMsgBytes, "intake-max-msg-bytes", 0, "largest intake message, headers included (default 1048576; env SAGAD_INTAKE_MAX_MSG_BYTES)")
	fs.Int64Var(&cfg.IntakeMaxBytes, "intake-max-bytes", 0, "bytes waiting in the intake, all producers together, reserved from JetStream's storage (default unbounded; env SAGAD_INTAKE_MAX_BYTES)")
	fs.Int64Var(&cfg.InlineArtifactBytes, "inline-artifact-bytes", 0, "largest artifact content sent inside an executor request; larger ones are fetched by reference on saga.artifacts.get (default 262144; env SAGAD_INLINE_ARTIFACT_BYTES)")
	fs.Float64Var(&cfg.IntakeRateMsgs, "intake-rate-msgs", 0, "capsules a second RECEPTION takes from one producer; more wait in the intake; negative: unlimited (default 200; env SAGAD_INTAKE_RATE_MSGS)")
	fs.Float64Var(&cfg.IntakeRateBytes, "intake-rate-bytes", 0, "intake bytes a second RECEPTION takes from one producer; negative: unlimited (default 4194304; env SAGAD_INTAKE_RATE_BYTES)")
	fs.IntVar(&cfg.MaxDepth, "max-depth", 0, "how deep capsules published by executor calls (parent_capsule_id) may nest; deeper halts depth_exceeded:<depth> (default 4; env SAGAD_MAX_DEPTH)")
	fs.IntVar(&cfg.Replicas, "replicas", 0, "stream and bucket replicas (default 1; env SAGAD_REPLICAS)")
	fs.BoolVar(&cfg.Migrate, "migrate", false, "change existing streams and buckets whose settings (replicas, retention...) differ from these flags; without it sagad refuses to start and changes nothing (env SAGAD_MIGRATE)")
	durationVar(fs, &cfg.StartTimeout, "start-timeout", "exit if NATS or a cluster able to hold the streams is not there within this long (default 0: wait as long as it takes; env SAGAD_START_TIMEOUT)")
	durationVar(fs, &cfg.ShutdownTimeout, "shutdown-timeout", "graceful shutdown bound (default 30s; env SAGAD_SHUTDOWN_TIMEOUT)")
	fs.StringVar(&cfg.Sync, "sync", "", "embedded server's fsync: always (before every ack), 1s (default: acknowledged writes on disk within 1s), default (the server's 2m) or another duration (env SAGAD_SYNC)")
	fs.StringVar(&cfg.ServerTLSCert, "server-tls-cert", "", "embedded server's TLS certificate (PEM); with it, clients must use TLS (env SAGAD_SERVER_TLS_CERT)")
	fs.StringVar(&cfg.ServerTLSKey, "server-tls-key", "", "embedded server's TLS key (PEM) (env SAGAD_SERVER_TLS_KEY)")
	fs.StringVar(&cfg.ServerTLSCA, "server-tls-ca", "", "embedded server requires client certificates signed by these CAs (env SAGAD_SERVER_TLS_CA)")
	fs.BoolVar(&cfg.Insecure, "insecure", false, "allow listening off loopback without TLS (embedded NATS, HTTP); logs a warning (env SAGAD_INSECURE)")
	fs.Var(syncAlwaysValue{&cfg.Sync}, "sync-always", "alias of --sync always (env SAGAD_SYNC_ALWAYS)")
	fs.Lookup("sync-always").NoOptDefVal = "true"
	durationVar(fs, &cfg.LockWait, "lock-wait", "retry contended locks this long, then park with lock_contention; negative halts at once (default 60s; env SAGAD_LOCK_WAIT)")
	fs.Float64Var(&cfg.BudgetWarning, "budget-warning", 0, "pause with budget_warning past this fraction of a cap; negative disables (default 0.75; env SAGAD_BUDGET_WARNING)")
	durationVar(fs, &cfg.DeadlineWarning, "deadline-warning", "pause with deadline_approaching when less is left; negative disables (default 5m; env SAGAD_DEADLINE_WARNING)")
	durationVar(fs, &cfg.ExternalTimeout, "external-timeout", "halt when accepted external work reports nothing for this long (default 1h; env SAGAD_EXTERNAL_TIMEOUT)")
	durationVar(fs, &cfg.DependencyTimeout, "dependency-timeout", "halt a capsule waiting this long for a dependency sagad does not know (dependency_missing) (default 24h; env SAGAD_DEPENDENCY_TIMEOUT)")
	durationVar(fs, &cfg.RescueAfter, "rescue-after", "send again the step of a capsule in progress unchanged this long with nothing queued for its phase; negative disables (default 2m; env SAGAD_RESCUE_AFTER)")
	durationVar(fs, &cfg.Retention, "retention", "keep ended capsules this long, then remove their state (outcomes stay); negative keeps them forever (default 168h; env SAGAD_RETENTION)")
	durationVar(fs, &cfg.WriteTimeout, "write-timeout", "bound of each JetStream write; one that times out is retried later (default 5s; env SAGAD_WRITE_TIMEOUT)")
	durationVar(fs, &cfg.UnhealthyAfter, "unhealthy-after", "JetStream writes failing this long make sagad unhealthy: ERROR log, sagad_jetstream_writes_failing 1, /readyz 503 (default 30s; env SAGAD_UNHEALTHY_AFTER)")
	durationVar(fs, &cfg.StallAfter, "stall-after", "/readyz reports a phase with pending work and no progress for this long (default 2m; env SAGAD_STALL_AFTER)")
	fs.StringVar(&cfg.OTelEndpoint, "otel-endpoint", "", "send OpenTelemetry traces to this OTLP/HTTP endpoint, e.g. http://localhost:4318 (default off, or OTEL_EXPORTER_OTLP_ENDPOINT; env SAGAD_OTEL_ENDPOINT)")
	fs.StringVar(&cfg.TraceURL, "trace-url", "", "link the console's trace ids to a tracing backend: a URL template holding {trace_id}, e.g. http://jaeger:16686/trace/{trace_id} (env SAGAD_TRACE_URL)")
}

// durationVar defines a flag of a [Duration] setting.
func durationVar(fs *pflag.FlagSet, p *Duration, name, usage string) {
	fs.Var((*durationValue)(p), name, usage)
}

// durationValue is a [Duration] as a flag: a Go duration ("30s").
type durationValue Duration

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

// String is "0" for zero, which pflag takes for an unset default (the
// usage says each default itself).
func (d *durationValue) String() string {
	if *d == 0 {
		return "0"
	}
	return time.Duration(*d).String()
}

func (d *durationValue) Type() string { return "duration" }

// syncAlwaysValue is --sync-always, the alias of --sync always, writing
// the sync policy it points at.
type syncAlwaysValue struct{ policy *string }

func (s syncAlwaysValue) Set(v string) error {
	on, err := strconv.ParseBool(v)
	if err != nil {
		return err
	}
	*s.policy = syncAlias(*s.policy, on)
	return nil
}

func (s syncAlwaysValue) String() string {
	if s.policy == nil {
		return "false"
	}
	return strconv.FormatBool(*s.policy == SyncAlways)
}

func (s syncAlwaysValue) Type() string { return "bool" }
