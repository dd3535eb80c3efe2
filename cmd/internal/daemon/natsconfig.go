package daemon

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"
)

// NATSConfigCommand is the argument that makes sagad write the NATS
// accounts of its configuration for an external nats-server instead of
// running: `sagad nats-config --config sagad.json --out DIR`.
const NATSConfigCommand = "nats-config"

// NATSAccountsFile is the file `sagad nats-config` writes in its output
// directory; a nats-server configuration includes it.
const NATSAccountsFile = "nats-accounts.conf"

// natsConfig writes DIR/nats-accounts.conf and DIR/creds/<role>.nk (seeds
// already there are kept), or with --passwords an accounts block whose
// users log in with a password from nats-server's environment
// (SAGA_<ROLE>_PASSWORD) and no seeds. 0 on success, 2 on bad arguments, 1
// on anything else.
func natsConfig(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("sagad "+NATSConfigCommand, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	config := fs.String("config", "", "sagad's config file (its executors, reviewers and producers)")
	out := fs.String("out", ".", "directory to write "+NATSAccountsFile+" and creds/ into")
	passwords := fs.Bool("passwords", false, "users log in with passwords from nats-server's environment (SAGA_<ROLE>_PASSWORD) instead of NKeys; writes no seeds")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sagad %s --config sagad.json --out DIR\n\nWrites the NATS accounts of sagad's roles for an external nats-server (include %s in its configuration) and one NKey seed per role in DIR/creds/.\n\n", NATSConfigCommand, NATSAccountsFile)
		fs.PrintDefaults()
	}
	if err := fs.Parse(longFlags(fs, args)); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "sagad %s: %v\n%s\n", NATSConfigCommand, err, usageHint("sagad "+NATSConfigCommand))
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sagad %s: unexpected argument %q\n", NATSConfigCommand, fs.Arg(0))
		return 2
	}
	var cfgArgs []string
	if *config != "" {
		cfgArgs = []string{"--config", *config}
	}
	cfg, err := parseConfig(cfgArgs, getenv, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "sagad %s: %v\n", NATSConfigCommand, err)
		return 2
	}
	text, err := natsConfigText(cfg.accountSpec(), *out, *passwords)
	if err == nil {
		err = os.MkdirAll(*out, 0o755)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(*out, NATSAccountsFile), []byte(text), 0o644)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sagad %s: %v\n", NATSConfigCommand, err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s\n", filepath.Join(*out, NATSAccountsFile))
	if !*passwords {
		fmt.Fprintf(stdout, "seeds in %s (one per role; give each client its own)\n", CredsDir(*out))
	}
	return 0
}

// natsConfigHeader opens every generated accounts file.
const natsConfigHeader = `# The NATS accounts of sagad's roles, written by ` + "`sagad " + NATSConfigCommand + "`" + ` from sagad's
# configuration: include this file from the nats-server configuration. Each
# role is an account of its own; only the service exports and imports below
# cross between them (README "Roles on the embedded server").
`

// natsConfigText is the accounts file for spec: NKey users with their seeds
// in dir/creds, or password users.
func natsConfigText(spec AccountSpec, dir string, passwords bool) (string, error) {
	if passwords {
		accounts, err := Accounts(spec)
		if err != nil {
			return "", err
		}
		return natsConfigHeader + "# Passwords come from nats-server's environment (SAGA_<ROLE>_PASSWORD).\n\n" + AccountsConf(accounts, PasswordCredential), nil
	}
	text, _, err := GenerateAccounts(spec, CredsDir(dir))
	if err != nil {
		return "", err
	}
	return natsConfigHeader + "\n" + text, nil
}
