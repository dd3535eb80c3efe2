package natsconn_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sagad/sagad/internal/natsconn"
	"github.com/sagad/sagad/internal/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://alice:s3cret@h:4222", "nats://alice:REDACTED@h:4222"},
		{"nats://t0ken@h:4222", "nats://REDACTED@h:4222"},
		{"tls://u:p@ss/w@rd@h", "tls://u:REDACTED@h"},
		{"u:pw@h:4222", "u:REDACTED@h:4222"},
		{"nats://a:x1@h1,nats://h2,nats://tok@h3", "nats://a:REDACTED@h1,nats://h2,nats://REDACTED@h3"},
		{"", ""},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, natsconn.Redact(tt.in), tt.in)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		o    natsconn.Options
		ok   bool
	}{
		{name: "nothing", ok: true},
		{name: "creds", o: natsconn.Options{Creds: "c"}, ok: true},
		{name: "user and password", o: natsconn.Options{User: "u", Password: "p"}, ok: true},
		{name: "user and password file", o: natsconn.Options{User: "u", PasswordFile: "p"}, ok: true},
		{name: "token", o: natsconn.Options{Token: "t"}, ok: true},
		{name: "mutual tls", o: natsconn.Options{TLSCA: "ca", TLSCert: "c", TLSKey: "k"}, ok: true},
		{name: "creds and nkey", o: natsconn.Options{Creds: "c", NKey: "n"}},
		{name: "user and token", o: natsconn.Options{User: "u", TokenFile: "t"}},
		{name: "password twice", o: natsconn.Options{User: "u", Password: "p", PasswordFile: "f"}},
		{name: "password without user", o: natsconn.Options{Password: "p"}},
		{name: "token twice", o: natsconn.Options{Token: "t", TokenFile: "f"}},
		{name: "cert without key", o: natsconn.Options{TLSCert: "c"}},
		{name: "key without cert", o: natsconn.Options{TLSKey: "k"}},
	}
	for _, tt := range tests {
		err := tt.o.Validate()
		if tt.ok {
			require.NoError(t, err, tt.name)
			continue
		}
		require.ErrorIs(t, err, natsconn.ErrInvalid, tt.name)
	}
}

func TestFlagsOverEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		natsconn.EnvURL: "nats://env:4222", natsconn.EnvUser: "env-user", natsconn.EnvPassword: "pw",
		natsconn.EnvTLSCA: "/env/ca.pem",
	}
	var flags natsconn.Options
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	flags.Bind(fs, "server")
	require.NoError(t, fs.Parse([]string{"--nats-url", "nats://flag:4222", "--nats-user", "flag-user", "--tls-cert", "c", "--tls-key", "k"}))
	got := natsconn.FromEnv(func(k string) string { return env[k] }).Merge(flags)
	require.Equal(t, natsconn.Options{
		URL: "nats://flag:4222", User: "flag-user", Password: "pw", TLSCA: "/env/ca.pem", TLSCert: "c", TLSKey: "k",
	}, got)
}

// TestFromEnvPrefix: sagad's variables are the same names under SAGAD_, and
// reading them never reads sagactl's SAGA_ ones (issue 35: a shell that
// exports SAGA_NATS_URL for sagactl must not move sagad).
func TestFromEnvPrefix(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"SAGA_NATS_URL": "nats://sagactl:4222", "SAGA_NATS_TOKEN": "sagactl-token",
		"SAGAD_NATS_URL": "nats://sagad:4222", "SAGAD_NATS_USER": "u", "SAGAD_NATS_PASSWORD_FILE": "/pw", "SAGAD_TLS_CA": "/ca.pem",
	}
	getenv := func(k string) string { return env[k] }
	require.Equal(t, natsconn.Options{URL: "nats://sagad:4222", User: "u", PasswordFile: "/pw", TLSCA: "/ca.pem"},
		natsconn.FromEnvPrefix(getenv, natsconn.DaemonEnvPrefix))
	require.Equal(t, natsconn.Options{URL: "nats://sagactl:4222", Token: "sagactl-token"}, natsconn.FromEnv(getenv))
	require.Equal(t, "SAGAD_TLS_KEY", natsconn.EnvName(natsconn.EnvTLSKey, natsconn.DaemonEnvPrefix))
	require.Len(t, natsconn.EnvNames(), 11)

	var flags natsconn.Options
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	flags.BindEnv(fs, "server", natsconn.DaemonEnvPrefix)
	require.Contains(t, fs.Lookup("nats-url").Usage, "(env SAGAD_NATS_URL)")
	require.Contains(t, fs.Lookup("nats-user").Usage, "or env SAGAD_NATS_PASSWORD (env SAGAD_NATS_USER)")
}

// secretFile writes s (with a trailing newline, as editors do) to a 0600 file.
func secretFile(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(p, []byte(s+"\n"), 0o600))
	return p
}

func TestConnectAuthenticates(t *testing.T) {
	t.Parallel()
	const password, token = "pa55-word-xyz", "t0ken-abc-123"
	userSrv := natstest.RunServerWith(t, func(o *server.Options) { o.Username, o.Password = "alice", password })
	tokenSrv := natstest.RunServerWith(t, func(o *server.Options) { o.Authorization = token })
	tests := []struct {
		name string
		o    natsconn.Options
		ok   bool
	}{
		{name: "password", o: natsconn.Options{URL: userSrv.ClientURL(), User: "alice", Password: password}, ok: true},
		{name: "password file", o: natsconn.Options{URL: userSrv.ClientURL(), User: "alice", PasswordFile: secretFile(t, password)}, ok: true},
		{name: "wrong password", o: natsconn.Options{URL: userSrv.ClientURL(), User: "alice", Password: password + "-no"}},
		{name: "token", o: natsconn.Options{URL: tokenSrv.ClientURL(), Token: token}, ok: true},
		{name: "token file", o: natsconn.Options{URL: tokenSrv.ClientURL(), TokenFile: secretFile(t, token)}, ok: true},
		{name: "wrong token file", o: natsconn.Options{URL: tokenSrv.ClientURL(), TokenFile: secretFile(t, token+"-no")}},
		{name: "no token", o: natsconn.Options{URL: tokenSrv.ClientURL()}},
		{name: "token in the URL", o: natsconn.Options{URL: strings.Replace(tokenSrv.ClientURL(), "://", "://"+token+"-no@", 1)}},
		{name: "password in the URL", o: natsconn.Options{URL: strings.Replace(userSrv.ClientURL(), "://", "://alice:"+password+"-no@", 1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			nc, err := tt.o.Connect(nats.MaxReconnects(0))
			if tt.ok {
				require.NoError(t, err)
				nc.Close()
				return
			}
			require.Error(t, err)
			var ce *natsconn.ConnectError
			require.True(t, errors.As(err, &ce), "%T", err)
			require.ErrorIs(t, err, nats.ErrAuthorization)
			for _, secret := range []string{password, token} {
				require.NotContains(t, err.Error(), secret)
			}
		})
	}
}

func TestConnectMutualTLS(t *testing.T) {
	t.Parallel()
	files := natstest.NewTLSFiles(t)
	s := natstest.RunTLSServer(t, files)
	url := strings.Replace(s.ClientURL(), "nats://", "tls://", 1)

	nc, err := natsconn.Options{URL: url, TLSCA: files.CA, TLSCert: files.ClientCert, TLSKey: files.ClientKey}.Connect(nats.MaxReconnects(0))
	require.NoError(t, err)
	require.True(t, nc.TLSRequired())
	nc.Close()

	// Without a client certificate the server refuses the handshake.
	_, err = natsconn.Options{URL: url, TLSCA: files.CA}.Connect(nats.MaxReconnects(0))
	require.Error(t, err)
	// Without the CA the client refuses the server's certificate.
	_, err = natsconn.Options{URL: url, TLSCert: files.ClientCert, TLSKey: files.ClientKey}.Connect(nats.MaxReconnects(0))
	require.Error(t, err)
}

func TestMissingFilesFailEarly(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing")
	for _, o := range []natsconn.Options{
		{Creds: missing}, {NKey: missing}, {User: "u", PasswordFile: missing}, {TokenFile: missing}, {TLSCA: missing},
		{TokenFile: secretFile(t, "")},
	} {
		_, err := o.NATSOptions()
		require.Error(t, err, "%+v", o)
	}
}

func TestWithDefaultNKey(t *testing.T) {
	t.Parallel()
	seed := secretFile(t, "SUAseed")
	missing := filepath.Join(t.TempDir(), "missing.nk")
	tests := []struct {
		name string
		o    natsconn.Options
		path string
		want string
	}{
		{name: "nothing given", path: seed, want: seed},
		{name: "no such file", path: missing},
		{name: "creds given", o: natsconn.Options{Creds: "c"}, path: seed},
		{name: "nkey given", o: natsconn.Options{NKey: "n"}, path: seed, want: "n"},
		{name: "user given", o: natsconn.Options{User: "u"}, path: seed},
		{name: "token given", o: natsconn.Options{Token: "t"}, path: seed},
		{name: "token file given", o: natsconn.Options{TokenFile: "t"}, path: seed},
		{name: "user in the URL", o: natsconn.Options{URL: "nats://h1,nats://u:p@h2"}, path: seed},
		{name: "plain URL", o: natsconn.Options{URL: "nats://h1:4222"}, path: seed, want: seed},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, tt.o.WithDefaultNKey(tt.path).NKey, tt.name)
	}
	require.Equal(t, filepath.Join("data", "creds", "operator.nk"), natsconn.DefaultSeed(natsconn.RoleOperator))
}

func TestAuthenticates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		o    natsconn.Options
		want bool
	}{
		{natsconn.Options{}, false},
		{natsconn.Options{URL: "nats://h1:4222,nats://h2:4222"}, false},
		{natsconn.Options{TLSCA: "ca.pem", TLSCert: "c", TLSKey: "k"}, false},
		{natsconn.Options{Creds: "c"}, true},
		{natsconn.Options{NKey: "n"}, true},
		{natsconn.Options{User: "u"}, true},
		{natsconn.Options{Token: "t"}, true},
		{natsconn.Options{TokenFile: "t"}, true},
		{natsconn.Options{URL: "nats://h1,nats://u:p@h2"}, true},
		{natsconn.Options{URL: "nats://token@h1"}, true},
	} {
		require.Equal(t, tt.want, tt.o.Authenticates(), "%+v", tt.o)
	}
}
