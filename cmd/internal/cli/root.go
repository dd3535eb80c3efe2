package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/internal/buildinfo"
	"github.com/sagad/sagad/internal/natsconn"
	"github.com/sagad/sagad/phases"
	"github.com/sagad/sagad/store"
)

// Exit codes.
const (
	ExitOK        = 0
	ExitFailure   = 1
	ExitUsage     = 2
	ExitHuman     = 3
	ExitNotFound  = 4
	ExitCancelled = 20
	ExitTimeout   = 21
)

// DefaultNATSURL is the embedded server's default address.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// exitError carries an exit code up to Main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

func exit(code int, err error) error { return &exitError{code: code, err: err} }

// globals are the flags every command shares.
type globals struct {
	// conn holds the connection flags; the SAGA_* environment fills in
	// what they leave empty, at connect time.
	conn natsconn.Options
	// oldCreds is --creds, the earlier name of --nats-creds.
	oldCreds string
	// context is --context: a NATS CLI context to take the connection
	// settings from; usedContext the one options read, for messages.
	context, usedContext string
	output               string
	// jsonPath is -o jsonpath=TEMPLATE's template, parsed.
	jsonPath []jpNode
	// noHeaders is --no-headers: list-like tables without their header.
	noHeaders bool
	timeout   time.Duration
}

// options are the connection settings in force: flags over SAGA_*
// environment variables over a NATS CLI context (--context NAME, or when
// neither flags nor environment name a server, the context `nats context
// select` chose) over the embedded server's default address and, when
// nothing else authenticates, the operator seed ./data/creds/operator.nk.
func (g *globals) options() (natsconn.Options, error) {
	flags := g.conn
	if flags.Creds == "" {
		flags.Creds = g.oldCreds
	}
	o := natsconn.FromEnv(os.Getenv).Merge(flags)
	// The selected context is a default server: a URL given by flag or
	// variable is another system, whose credentials the context's would
	// only contradict.
	if g.context != "" || o.URL == "" {
		ctx, ok, err := natsconn.LoadContext(g.context, os.Getenv)
		if err != nil {
			return natsconn.Options{}, exit(ExitUsage, err)
		}
		if ok {
			g.usedContext = ctx.Name
			o = ctx.Options.Merge(o)
		}
	}
	if o.URL == "" {
		o.URL = DefaultNATSURL
	}
	// Run from sagad's directory, sagactl is the operator of its embedded
	// server without being told.
	return o.WithDefaultNKey(natsconn.DefaultSeed(natsconn.RoleOperator)), nil
}

// dialNATS connects to NATS. Its errors name the server with credentials
// redacted, and the context the settings came from, if any.
func (g *globals) dialNATS() (*nats.Conn, error) {
	o, err := g.options()
	if err != nil {
		return nil, err
	}
	nc, err := o.Connect(nats.Name("sagactl"), nats.Timeout(5*time.Second))
	if err != nil && g.usedContext != "" {
		err = fmt.Errorf("%w\nsagactl: (settings from the NATS context %q)", err, g.usedContext)
	}
	var ce *natsconn.ConnectError
	switch {
	case errors.Is(err, nats.ErrAuthorization) && !o.Authenticates() && o.TLSCert == "":
		// The commonest cause: sagactl run outside sagad's directory,
		// where the default seed is not.
		return nil, fmt.Errorf("%w\nsagactl: (no credentials: %s, the operator's seed sagactl uses by default, does not exist here; "+
			"run sagactl from sagad's directory or pass --nats-nkey <sagad's data dir>/%s/%s (env %s))",
			err, absPath(natsconn.DefaultSeed(natsconn.RoleOperator)), natsconn.CredsDirName, natsconn.RoleOperator+natsconn.SeedExt, natsconn.EnvNKey)
	case errors.Is(err, nats.ErrAuthorization):
		return nil, fmt.Errorf("%w\nsagactl: (NATS refused the credentials given: for sagad's embedded server, --nats-nkey <sagad's data dir>/%s/%s)",
			err, natsconn.CredsDirName, natsconn.RoleOperator+natsconn.SeedExt)
	case errors.As(err, &ce):
		return nil, fmt.Errorf("%w (is sagad running? set --nats-url or %s)", err, natsconn.EnvURL)
	}
	return nc, err
}

// absPath is p made absolute, for a message that names where a file was
// looked for; p itself if that fails.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// publisher opens a NATS connection for publishing capsules: a plain
// publish on the intake subject, which needs no JetStream API rights.
func (g *globals) publisher() (*client.Client, func(), error) {
	nc, err := g.dialNATS()
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return client.NewPublisher(js), nc.Close, nil
}

// Output formats of --output.
const (
	outputTable = "table"
	outputWide  = "wide"
	outputJSON  = "json"
	outputYAML  = "yaml"
)

// encoder is the structured encoder of -o json or -o yaml, nil for the
// tables (-o table, -o wide).
func (g *globals) encoder() encodeFunc {
	switch {
	case g.output == outputJSON:
		return writeJSON
	case g.output == outputYAML:
		return writeYAML
	case g.jsonPath != nil:
		return jsonPathEncoder(g.jsonPath)
	}
	return nil
}

// NewRoot builds the sagactl command tree writing to out and errOut.
func NewRoot(out, errOut io.Writer) *cobra.Command {
	root, _ := newRoot(out, errOut)
	return root
}

func newRoot(out, errOut io.Writer) (*cobra.Command, *globals) {
	g := &globals{}
	root := &cobra.Command{
		Use:   "sagactl",
		Short: "Admin CLI for sagad, the capsule saga daemon",
		Long: `sagactl publishes capsules to sagad and inspects them.

Admin commands (pause, resume, cancel, decide, replay, pending, phase, wave) are requests to
sagad's admin service (saga.admin.<verb>, docs/ADMIN.md): they need a running
sagad, which carries them out. Read commands (status, list, history, watch,
report, wait) are requests to the same service: sagactl needs no JetStream
rights, only to publish on saga.intake and to call saga.admin.>.

Exit codes:
  0   success; wait: completed; check: clean
  1   failure; wait: halted; check: findings
  2   usage error or unreadable input
  3   wait: the capsule needs a human (paused, waiting_for_operator; not
      a pause on accepted external work, which wait waits out)
  4   capsule not found
  5   refused: the capsule's (or wave's) state does not allow the action
      (nothing changed)
  6   no sagad answered an admin command: is sagad running?
  20  wait: cancelled
  21  wait: timed out`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// cobra adds --version (print and exit 0) when Version is set.
		Version: buildinfo.String("sagactl"),
		PersistentPreRunE: func(*cobra.Command, []string) error {
			switch g.output {
			case outputTable, outputWide, outputJSON, outputYAML:
				return nil
			}
			if tmpl, ok := strings.CutPrefix(g.output, outputJSONPath); ok {
				nodes, err := parseJSONPath(tmpl)
				if err != nil {
					return exit(ExitUsage, err)
				}
				g.jsonPath = nodes
				return nil
			}
			return exit(ExitUsage, fmt.Errorf("--output %q: want table, wide, json, yaml or jsonpath=TEMPLATE", g.output))
		},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetOut(out)
	root.SetErr(errOut)
	g.conn.Bind(root.PersistentFlags(), "NATS URL (default "+DefaultNATSURL+", sagad's embedded server)")
	root.PersistentFlags().StringVar(&g.context, "context", "", "NATS CLI context (see: nats context ls) to connect with; flags and SAGA_* win over its settings (default: the selected context, when no URL is given)")
	root.PersistentFlags().StringVar(&g.oldCreds, "creds", "", "NATS credentials file")
	_ = root.PersistentFlags().MarkDeprecated("creds", "use --nats-creds")
	root.PersistentFlags().StringVarP(&g.output, "output", "o", "table", "output format: table, wide (list: every column), json, yaml or jsonpath=TEMPLATE (kubectl's: jsonpath='{[*].capsule_id}')")
	root.PersistentFlags().DurationVar(&g.timeout, "request-timeout", 10*time.Second, "timeout of each NATS request")
	root.AddCommand(
		newPublish(g), newSeal(g), newCheck(g), newChain(g), newCompose(g), newComposition(g),
		newStatus(g), newWait(g), newList(g), newHistory(g),
		newPause(g), newResume(g), newCancel(g), newDecide(g), newReplay(g), newBulk(g), newPending(g), newPhase(g), newWave(g),
		newWatch(g), newReport(g), newRules(g), newCost(g), newAgents(g), newModels(g),
	)
	// cobra adds `sagactl completion bash|zsh|fish|powershell`; capsule
	// ids complete from the checkpoint bucket.
	addIDCompletion(g, root)
	addValueCompletion(g, root)
	return root, g
}

// Main runs sagactl and returns its exit code.
func Main(args []string, out, errOut io.Writer) int {
	return MainInput(args, nil, out, errOut)
}

// MainInput is Main reading standard input from in (nil: the process's).
func MainInput(args []string, in io.Reader, out, errOut io.Writer) int {
	root, g := newRoot(out, errOut)
	if in != nil {
		root.SetIn(in)
	}
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	if err == nil {
		return ExitOK
	}
	err = g.explainUnreached(err)
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			printError(errOut, ee.err)
		}
		return ee.code
	}
	printError(errOut, err)
	if isUsage(err) {
		return ExitUsage
	}
	if errors.Is(err, store.ErrNotFound) {
		return ExitNotFound
	}
	return ExitFailure
}

func printError(errOut io.Writer, err error) {
	// Errors can quote capsule data (a schema finding, a state): each line is
	// made printable, the lines kept, and so are tabs, which move no cursor
	// anywhere harmful and indent cobra's "Did you mean this?" suggestions.
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		cells := strings.Split(l, "\t")
		for j, c := range cells {
			cells[j] = printable(c)
		}
		lines[i] = strings.Join(cells, "\t")
	}
	fmt.Fprintln(errOut, "sagactl:", strings.Join(lines, "\n"))
	if errors.Is(err, store.ErrNotFound) {
		// The common surprise: sagad forgets ended capsules after its retention.
		fmt.Fprintln(errOut, "sagactl: (never published here, or ended longer ago than sagad's --retention)")
	}
}

// isUsage recognises cobra's argument and flag errors.
func isUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires ", "invalid argument", "flag needs"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// MaxInputBytes bounds what sagactl reads from a file or stdin: sagad's
// intake limit (phases.DefaultMaxIntakeBytes, past which a capsule halts
// capsule_too_large) with as much again as slack, so that --raw can still
// show the daemon's refusal of an oversized capsule. It is also NATS's
// default max_payload, past which no publish succeeds anyway.
const MaxInputBytes = 2 * phases.DefaultMaxIntakeBytes

// ErrInputTooLarge is wrapped by the error of a command whose input exceeds
// [MaxInputBytes].
var ErrInputTooLarge = fmt.Errorf("input exceeds %d bytes", MaxInputBytes)

// readInput reads FILE or "-" (stdin), at most [MaxInputBytes]: reading
// stops one byte past the limit, so /dev/zero or an endless pipe fails at
// once instead of filling memory.
func readInput(cmd *cobra.Command, name string) ([]byte, error) {
	b, err := readLimited(cmd.InOrStdin(), name, MaxInputBytes)
	if err != nil {
		return nil, exit(ExitUsage, fmt.Errorf("read %s: %w", name, err))
	}
	return b, nil
}

func readLimited(stdin io.Reader, name string, limit int64) ([]byte, error) {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > limit {
			return nil, ErrInputTooLarge
		}
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, ErrInputTooLarge
	}
	return b, nil
}
