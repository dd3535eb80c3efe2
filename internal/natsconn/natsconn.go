package natsconn

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"
)

// Environment variables, the same for sagad and sagactl.
const (
	EnvURL          = "SAGA_NATS_URL"
	EnvCreds        = "SAGA_NATS_CREDS"
	EnvNKey         = "SAGA_NATS_NKEY"
	EnvUser         = "SAGA_NATS_USER"
	EnvPassword     = "SAGA_NATS_PASSWORD"
	EnvPasswordFile = "SAGA_NATS_PASSWORD_FILE"
	EnvToken        = "SAGA_NATS_TOKEN"
	EnvTokenFile    = "SAGA_NATS_TOKEN_FILE"
	EnvTLSCA        = "SAGA_TLS_CA"
	EnvTLSCert      = "SAGA_TLS_CERT"
	EnvTLSKey       = "SAGA_TLS_KEY"
)

// The roles of sagad's embedded server, each a user with its own NKey in a
// NATS account of its own (cmd/internal/daemon's accounts.go). A worker's role
// is executor-<kind> or reviewer-<id>, a named producer's producer-<name>.
const (
	RoleSagad    = "sagad"
	RoleOperator = "operator"
	RoleProducer = "producer"
)

// The NATS accounts of roles on sagad's embedded server that clients
// reason about (cmd/internal/daemon's accounts.go has them all).
const (
	// AccountOperator is the operator's, the only account that imports
	// sagad's admin service.
	AccountOperator = "OPERATOR"
	// AccountProducer is the default producer's; producer P's is
	// AccountProducer_P.
	AccountProducer = "PRODUCER"
)

// Where sagad keeps the NKey seeds of its embedded server's roles: the
// seed of role R is <data dir>/CredsDirName/R+SeedExt.
const (
	CredsDirName = "creds"
	SeedExt      = ".nk"
)

// DefaultSeed is where a client run from sagad's working directory finds
// role's seed when sagad runs with its default data directory:
// ./data/creds/<role>.nk.
func DefaultSeed(role string) string {
	return filepath.Join("data", CredsDirName, role+SeedExt)
}

// WithDefaultNKey returns o authenticating with the NKey seed at path when
// o has no way to authenticate of its own (no creds, nkey, user, token, or
// user information in the URL) and the file exists; otherwise o unchanged.
func (o Options) WithDefaultNKey(path string) Options {
	if o.Authenticates() {
		return o
	}
	if _, err := os.Stat(path); err != nil {
		return o
	}
	o.NKey = path
	return o
}

// Authenticates reports whether o has a way to authenticate: creds, an
// nkey, a user, a token, or user information in the URL.
func (o Options) Authenticates() bool {
	if o.Creds != "" || o.NKey != "" || o.User != "" || o.Token != "" || o.TokenFile != "" {
		return true
	}
	for _, u := range strings.Split(o.URL, ",") {
		if _, ok := userinfo(u); ok {
			return true
		}
	}
	return false
}

// ErrInvalid wraps every contradiction among the settings (two ways to
// authenticate, a password without a user, a certificate without its key).
var ErrInvalid = errors.New("natsconn: invalid connection settings")

// Options are the settings of one connection to NATS. The JSON names are
// sagad's config file keys; a password or token is never read from a config
// file, only from the environment or a file of its own.
type Options struct {
	// URL is the server URL, or several separated by commas.
	URL string `json:"nats_url"`
	// Creds is a credentials file: a user JWT and its NKey seed.
	Creds string `json:"nats_creds"`
	// NKey is a file holding an NKey user seed.
	NKey string `json:"nats_nkey"`
	// User authenticates with Password or PasswordFile.
	User string `json:"nats_user"`
	// Password is the user's password (environment only).
	Password string `json:"-"`
	// PasswordFile holds the user's password (one line).
	PasswordFile string `json:"nats_password_file"`
	// Token is an authentication token (environment only).
	Token string `json:"-"`
	// TokenFile holds an authentication token (one line).
	TokenFile string `json:"nats_token_file"`
	// TLSCA is a PEM file of the CA certificates that sign the server's
	// certificate; setting it requires TLS.
	TLSCA string `json:"tls_ca"`
	// TLSCert is the client certificate (PEM) for mutual TLS; needs TLSKey.
	TLSCert string `json:"tls_cert"`
	// TLSKey is TLSCert's private key (PEM).
	TLSKey string `json:"tls_key"`
}

// fields lists every setting in one order, for FromEnv and Merge.
func (o *Options) fields() []struct {
	p   *string
	env string
} {
	return []struct {
		p   *string
		env string
	}{
		{&o.URL, EnvURL}, {&o.Creds, EnvCreds}, {&o.NKey, EnvNKey},
		{&o.User, EnvUser}, {&o.Password, EnvPassword}, {&o.PasswordFile, EnvPasswordFile},
		{&o.Token, EnvToken}, {&o.TokenFile, EnvTokenFile},
		{&o.TLSCA, EnvTLSCA}, {&o.TLSCert, EnvTLSCert}, {&o.TLSKey, EnvTLSKey},
	}
}

// EnvPrefix is the prefix of the variables sagactl and workers read;
// sagad reads the same names with its own prefix, [DaemonEnvPrefix].
const EnvPrefix = "SAGA_"

// DaemonEnvPrefix is the prefix of sagad's own variables: SAGAD_NATS_URL
// and so on. A shell that exports SAGA_NATS_URL for sagactl must not move
// a sagad started from it to another server.
const DaemonEnvPrefix = "SAGAD_"

// EnvName is the variable of setting env (one of the Env* constants) under
// prefix: EnvName(EnvURL, DaemonEnvPrefix) is "SAGAD_NATS_URL".
func EnvName(env, prefix string) string {
	return prefix + strings.TrimPrefix(env, EnvPrefix)
}

// EnvNames lists the variables of every setting, with the standard
// [EnvPrefix].
func EnvNames() []string {
	var o Options
	var names []string
	for _, f := range o.fields() {
		names = append(names, f.env)
	}
	return names
}

// FromEnv reads the SAGA_* variables; empty ones are unset.
func FromEnv(getenv func(string) string) Options {
	return FromEnvPrefix(getenv, EnvPrefix)
}

// FromEnvPrefix reads the variables of the settings under prefix
// (SAGAD_NATS_URL for [DaemonEnvPrefix]); empty ones are unset.
func FromEnvPrefix(getenv func(string) string, prefix string) Options {
	var o Options
	for _, f := range o.fields() {
		*f.p = getenv(EnvName(f.env, prefix))
	}
	return o
}

// Merge returns o with each setting that over has replacing o's.
func (o Options) Merge(over Options) Options {
	src := over.fields()
	for i, f := range o.fields() {
		if v := *src[i].p; v != "" {
			*f.p = v
		}
	}
	return o
}

// FlagSet is what both the standard library's flag.FlagSet and cobra's
// pflag.FlagSet offer, so both binaries declare the same flags.
type FlagSet interface {
	StringVar(p *string, name, value, usage string)
}

// Bind declares the connection flags on fs, writing into o. Their defaults
// are empty, so a caller can tell a flag given from one absent and merge the
// flags over the environment. urlUsage describes --nats-url (its default
// differs per binary).
func (o *Options) Bind(fs FlagSet, urlUsage string) {
	o.BindEnv(fs, urlUsage, EnvPrefix)
}

// BindEnv is [Options.Bind] for a binary whose variables have prefix (sagad:
// [DaemonEnvPrefix]): each flag's usage names its variable.
func (o *Options) BindEnv(fs FlagSet, urlUsage, prefix string) {
	env := func(name string) string { return EnvName(name, prefix) }
	fs.StringVar(&o.URL, "nats-url", "", urlUsage+" (env "+env(EnvURL)+")")
	fs.StringVar(&o.Creds, "nats-creds", "", "NATS credentials file, user JWT and NKey seed (env "+env(EnvCreds)+")")
	fs.StringVar(&o.NKey, "nats-nkey", "", "NATS NKey seed file (env "+env(EnvNKey)+")")
	fs.StringVar(&o.User, "nats-user", "", "NATS user; password from --nats-password-file or env "+env(EnvPassword)+" (env "+env(EnvUser)+")")
	fs.StringVar(&o.PasswordFile, "nats-password-file", "", "file holding the NATS user's password (env "+env(EnvPasswordFile)+")")
	fs.StringVar(&o.TokenFile, "nats-token-file", "", "file holding a NATS token; or env "+env(EnvToken)+" (env "+env(EnvTokenFile)+")")
	fs.StringVar(&o.TLSCA, "tls-ca", "", "CA certificates (PEM) that sign the NATS server's certificate (env "+env(EnvTLSCA)+")")
	fs.StringVar(&o.TLSCert, "tls-cert", "", "client certificate (PEM) for mutual TLS (env "+env(EnvTLSCert)+")")
	fs.StringVar(&o.TLSKey, "tls-key", "", "client certificate's key (PEM) (env "+env(EnvTLSKey)+")")
}

// Validate reports contradictory settings.
func (o Options) Validate() error {
	var methods []string
	if o.Creds != "" {
		methods = append(methods, "credentials file")
	}
	if o.NKey != "" {
		methods = append(methods, "nkey")
	}
	if o.User != "" {
		methods = append(methods, "user")
	}
	if o.Token != "" || o.TokenFile != "" {
		methods = append(methods, "token")
	}
	var errs []error
	if len(methods) > 1 {
		errs = append(errs, fmt.Errorf("%w: choose one way to authenticate, not %s", ErrInvalid, strings.Join(methods, " and ")))
	}
	if o.Password != "" && o.PasswordFile != "" {
		errs = append(errs, fmt.Errorf("%w: a password and a password file", ErrInvalid))
	}
	if (o.Password != "" || o.PasswordFile != "") && o.User == "" {
		errs = append(errs, fmt.Errorf("%w: a password without a user", ErrInvalid))
	}
	if o.Token != "" && o.TokenFile != "" {
		errs = append(errs, fmt.Errorf("%w: a token and a token file", ErrInvalid))
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		errs = append(errs, fmt.Errorf("%w: a TLS certificate needs its key and a key its certificate", ErrInvalid))
	}
	return errors.Join(errs...)
}

// NATSOptions turns the settings into nats.go options, reading the password,
// token and NKey seed files now so that a missing file fails early. Errors
// name files, never their content.
func (o Options) NATSOptions() ([]nats.Option, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	var opts []nats.Option
	switch {
	case o.Creds != "":
		if _, err := os.Stat(o.Creds); err != nil {
			return nil, fmt.Errorf("nats credentials file: %w", err)
		}
		opts = append(opts, nats.UserCredentials(o.Creds))
	case o.NKey != "":
		opt, err := nats.NkeyOptionFromSeed(o.NKey)
		if err != nil {
			return nil, fmt.Errorf("nats nkey seed file %s: %w", o.NKey, err)
		}
		opts = append(opts, opt)
	case o.User != "":
		pw := o.Password
		if o.PasswordFile != "" {
			var err error
			if pw, err = readSecret(o.PasswordFile, "password"); err != nil {
				return nil, err
			}
		}
		opts = append(opts, nats.UserInfo(o.User, pw))
	case o.Token != "" || o.TokenFile != "":
		tok := o.Token
		if o.TokenFile != "" {
			var err error
			if tok, err = readSecret(o.TokenFile, "token"); err != nil {
				return nil, err
			}
		}
		opts = append(opts, nats.Token(tok))
	}
	if o.TLSCA != "" {
		opts = append(opts, nats.RootCAs(o.TLSCA))
	}
	if o.TLSCert != "" {
		opts = append(opts, nats.ClientCert(o.TLSCert, o.TLSKey))
	}
	// Applying the options to a scratch copy loads the TLS files now.
	scratch := nats.GetDefaultOptions()
	for _, opt := range opts {
		if err := opt(&scratch); err != nil {
			return nil, err
		}
	}
	return opts, nil
}

// readSecret reads a one-line secret file; the trailing newline an editor
// adds is not part of it.
func readSecret(path, what string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("nats %s file: %w", what, err)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("nats %s file %s is empty", what, path)
	}
	return s, nil
}

// Connect connects to o.URL with the settings and extra options (a name,
// reconnect policy, handlers). A failure is a [*ConnectError], whose message
// names the server without credentials.
func (o Options) Connect(extra ...nats.Option) (*nats.Conn, error) {
	opts, err := o.NATSOptions()
	if err != nil {
		return nil, err
	}
	url := o.URL
	if url == "" {
		url = nats.DefaultURL
	}
	nc, err := nats.Connect(url, append(opts, extra...)...)
	if err != nil {
		return nil, &ConnectError{URL: Redact(url), Err: err, secrets: o.secrets()}
	}
	return nc, nil
}

// secrets lists the credentials an error message must not carry: the
// password, the token and the URL's user information.
func (o Options) secrets() []string {
	s := []string{o.Password, o.Token}
	for _, u := range strings.Split(o.URL, ",") {
		if info, ok := userinfo(u); ok {
			if _, pw, ok := strings.Cut(info, ":"); ok {
				s = append(s, pw)
			} else {
				s = append(s, info) // a token
			}
		}
	}
	return s
}

// ConnectError is a failed connection attempt.
type ConnectError struct {
	// URL is the server URL with its credentials redacted.
	URL string
	// Err is nats.go's error.
	Err     error
	secrets []string
}

// Error names the redacted URL and the cause, with any credential that the
// cause might quote replaced.
func (e *ConnectError) Error() string {
	msg := fmt.Sprintf("connect to NATS at %s: %v", e.URL, e.Err)
	for _, s := range e.secrets {
		// A secret this short would mangle the message and is no secret.
		if len(s) >= 4 {
			msg = strings.ReplaceAll(msg, s, redacted)
		}
	}
	return msg
}

// Unwrap returns the cause.
func (e *ConnectError) Unwrap() error { return e.Err }

const redacted = "REDACTED"

// Redact returns url (one URL or several separated by commas) with its user
// information replaced: "nats://u:secret@h:4222" becomes
// "nats://u:REDACTED@h:4222", and "nats://token@h" becomes
// "nats://REDACTED@h", since a lone user part may be a token.
func Redact(url string) string {
	parts := strings.Split(url, ",")
	for i, p := range parts {
		scheme, rest := "", p
		if j := strings.Index(p, "://"); j >= 0 {
			scheme, rest = p[:j+3], p[j+3:]
		}
		// NATS URLs have no path, so the last '@' ends the user
		// information even if a password holds '/' or '@'.
		at := strings.LastIndex(rest, "@")
		if at < 0 {
			continue
		}
		info := rest[:at]
		if user, _, ok := strings.Cut(info, ":"); ok {
			info = user + ":" + redacted
		} else {
			info = redacted
		}
		parts[i] = scheme + info + rest[at:]
	}
	return strings.Join(parts, ",")
}

// userinfo returns the user information of one URL.
func userinfo(u string) (string, bool) {
	if j := strings.Index(u, "://"); j >= 0 {
		u = u[j+3:]
	}
	at := strings.LastIndex(u, "@")
	if at <= 0 {
		return "", false
	}
	return u[:at], true
}
