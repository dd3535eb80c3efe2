package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/sagad/sagad/internal/natsconn"
	"github.com/sagad/sagad/pipeline"
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
	output   string
	timeout  time.Duration
}

// options are the connection settings in force: flags over SAGA_*
// environment variables over the embedded server's default address and,
// when nothing else authenticates, the operator seed ./data/creds/operator.nk.
func (g *globals) options() natsconn.Options {
	flags := g.conn
	if flags.Creds == "" {
		flags.Creds = g.oldCreds
	}
	o := natsconn.FromEnv(os.Getenv).Merge(flags)
	if o.URL == "" {
		o.URL = DefaultNATSURL
	}
	// Run from sagad's directory, sagactl is the operator of its embedded
	// server without being told.
	return o.WithDefaultNKey(natsconn.DefaultSeed(natsconn.RoleOperator))
}

// dialNATS connects to NATS. Its errors name the server with credentials
// redacted.
func (g *globals) dialNATS() (*nats.Conn, error) {
	nc, err := g.options().Connect(nats.Name("sagactl"), nats.Timeout(5*time.Second))
	var ce *natsconn.ConnectError
	if errors.As(err, &ce) {
		return nil, fmt.Errorf("%w (is sagad running? set --nats-url or %s)", err, natsconn.EnvURL)
	}
	return nc, err
}

// connect opens a NATS connection and binds a pipeline client.
func (g *globals) connect(ctx context.Context) (*pipeline.Client, jetstream.JetStream, func(), error) {
	nc, err := g.dialNATS()
	if err != nil {
		return nil, nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	c, err := pipeline.NewClient(ctx, js)
	if err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	return c, js, nc.Close, nil
}

func (g *globals) json() bool { return g.output == "json" }

// NewRoot builds the sagactl command tree writing to out and errOut.
func NewRoot(out, errOut io.Writer) *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "sagactl",
		Short: "Admin CLI for sagad, the capsule saga daemon",
		Long: `sagactl publishes capsules to sagad and inspects them.

Exit codes:
  0   success; wait: completed; check: clean
  1   failure; wait: halted; check: findings
  2   usage error or unreadable input
  3   wait: the capsule needs a human (paused, waiting_for_operator)
  4   capsule not found
  5   refused: the capsule's state does not allow the action (nothing changed)
  20  wait: cancelled
  21  wait: timed out`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if g.output != "table" && g.output != "json" {
				return exit(ExitUsage, fmt.Errorf("--output %q: want table or json", g.output))
			}
			return nil
		},
	}
	root.SetOut(out)
	root.SetErr(errOut)
	g.conn.Bind(root.PersistentFlags(), "NATS URL (default "+DefaultNATSURL+", sagad's embedded server)")
	root.PersistentFlags().StringVar(&g.oldCreds, "creds", "", "NATS credentials file")
	_ = root.PersistentFlags().MarkDeprecated("creds", "use --nats-creds")
	root.PersistentFlags().StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	root.PersistentFlags().DurationVar(&g.timeout, "request-timeout", 10*time.Second, "timeout of each NATS request")
	root.AddCommand(
		newPublish(g), newSeal(g), newCheck(g),
		newStatus(g), newWait(g), newList(g), newHistory(g),
		newPause(g), newResume(g), newCancel(g), newDecide(g), newPending(g), newPhase(g),
		newWatch(g), newReport(g), newRules(g),
	)
	return root
}

// Main runs sagactl and returns its exit code.
func Main(args []string, out, errOut io.Writer) int {
	root := NewRoot(out, errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	if err == nil {
		return ExitOK
	}
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
	if errors.Is(err, pipeline.ErrNotFound) {
		return ExitNotFound
	}
	return ExitFailure
}

func printError(errOut io.Writer, err error) {
	fmt.Fprintln(errOut, "sagactl:", err)
	if errors.Is(err, pipeline.ErrNotFound) {
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

// readInput reads FILE or "-" (stdin).
func readInput(cmd *cobra.Command, name string) ([]byte, error) {
	var b []byte
	var err error
	if name == "-" {
		b, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 16<<20))
	} else {
		b, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, exit(ExitUsage, fmt.Errorf("read %s: %w", name, err))
	}
	return b, nil
}
