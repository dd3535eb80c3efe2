package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/store"
)

// connected is what sagactl says when it reached NATS (with the flags under
// test) and found no sagad there.
var connected = "sagactl: " + store.ErrNoTopology.Error() + "\n"

func secretFile(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(p, []byte(s+"\n"), 0o600))
	return p
}

// TestSecretsNeverPrinted: a password in the URL, a token from the
// environment and a password file, right or wrong, never show on stderr.
// Not parallel: it sets environment variables.
func TestSecretsNeverPrinted(t *testing.T) {
	const password, token = "hunter2-pa55word", "t0ken-9f8e7d6c"
	userSrv := natstest.RunServerWith(t, func(o *server.Options) { o.Username, o.Password = "operator", password })
	tokenSrv := natstest.RunServerWith(t, func(o *server.Options) { o.Authorization = token })
	withUserinfo := func(url, info string) string { return strings.Replace(url, "nats://", "nats://"+info+"@", 1) }
	id := capsuletest.NewID()
	tests := []struct {
		name   string
		env    map[string]string
		args   []string
		wantOK bool
	}{
		{name: "password in the URL", args: []string{"--nats-url", withUserinfo(userSrv.ClientURL(), "operator:"+password)}, wantOK: true},
		{name: "wrong password in the URL", args: []string{"--nats-url", withUserinfo(userSrv.ClientURL(), "operator:"+password+"-wrong")}},
		{name: "password in the URL from env", env: map[string]string{"SAGA_NATS_URL": withUserinfo(userSrv.ClientURL(), "operator:"+password+"-wrong")}},
		{name: "token from env", env: map[string]string{"SAGA_NATS_URL": tokenSrv.ClientURL(), "SAGA_NATS_TOKEN": token}, wantOK: true},
		{name: "wrong token from env", env: map[string]string{"SAGA_NATS_URL": tokenSrv.ClientURL(), "SAGA_NATS_TOKEN": token + "-wrong"}},
		{name: "token in the URL", args: []string{"--nats-url", withUserinfo(tokenSrv.ClientURL(), token+"-wrong")}},
		{name: "password file", args: []string{"--nats-url", userSrv.ClientURL(), "--nats-user", "operator", "--nats-password-file", secretFile(t, password)}, wantOK: true},
		{name: "wrong password file", args: []string{"--nats-url", userSrv.ClientURL(), "--nats-user", "operator", "--nats-password-file", secretFile(t, password+"-wrong")}},
		{name: "password from env", env: map[string]string{"SAGA_NATS_USER": "operator", "SAGA_NATS_PASSWORD": password}, args: []string{"--nats-url", userSrv.ClientURL()}, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			r := run(t, append(tt.args, "status", id)...)
			require.Equal(t, cli.ExitFailure, r.code)
			if tt.wantOK {
				require.Equal(t, connected, r.errOut)
			} else {
				require.Contains(t, r.errOut, "Authorization Violation")
			}
			require.NotContains(t, r.errOut+r.out, password)
			require.NotContains(t, r.errOut+r.out, token)
		})
	}
}

func TestMutualTLSFlags(t *testing.T) {
	t.Parallel()
	files := natstest.NewTLSFiles(t)
	s := natstest.RunTLSServer(t, files)
	url := strings.Replace(s.ClientURL(), "nats://", "tls://", 1)
	id := capsuletest.NewID()

	r := run(t, "--nats-url", url, "--tls-ca", files.CA, "--tls-cert", files.ClientCert, "--tls-key", files.ClientKey, "status", id)
	require.Equal(t, connected, r.errOut)

	r = run(t, "--nats-url", url, "--tls-ca", files.CA, "status", id)
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.errOut, "sagactl: connect to NATS at "+url)
}

// TestCredsHints: refused with no credential at all, sagactl names the
// default seed it looked for and --nats-nkey; refused with one, it says the
// credential was refused; neither asks whether sagad is running.
func TestCredsHints(t *testing.T) {
	t.Parallel()
	s := natstest.RunServerWith(t, func(o *server.Options) { o.Username, o.Password = "operator", "right-password" })
	id := capsuletest.NewID()

	r := run(t, "--nats-url", s.ClientURL(), "status", id)
	require.Equal(t, cli.ExitFailure, r.code)
	seed, err := filepath.Abs(filepath.Join("data", "creds", "operator.nk"))
	require.NoError(t, err)
	require.Contains(t, r.errOut, "Authorization Violation")
	require.Contains(t, r.errOut, "\nsagactl: (no credentials: "+seed+", the operator's seed sagactl uses by default, does not exist here; "+
		"run sagactl from sagad's directory or pass --nats-nkey <sagad's data dir>/creds/operator.nk (env SAGA_NATS_NKEY))\n")
	require.NotContains(t, r.errOut, "is sagad running?")

	r = run(t, "--nats-url", s.ClientURL(), "--nats-user", "operator", "--nats-password-file", secretFile(t, "wrong-password"), "status", id)
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.errOut, "\nsagactl: (NATS refused the credentials given: ")
	require.NotContains(t, r.errOut, "is sagad running?")
}

// writeContext writes a NATS CLI context NAME under config/nats/context/,
// as `nats context save` does, and selects it when selected.
func writeContext(t *testing.T, config, name, body string, selected bool) {
	t.Helper()
	dir := filepath.Join(config, "nats", "context")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".json"), []byte(body), 0o600))
	if selected {
		require.NoError(t, os.WriteFile(filepath.Join(config, "nats", "context.txt"), []byte(name), 0o600))
	}
}

// TestNATSContexts: sagactl connects with a NATS CLI context, the selected
// one or the one --context names, as the nats CLI would; a URL given by
// flag or SAGA_NATS_URL is another system, and the selected context stays
// out of it. Not parallel: it sets XDG_CONFIG_HOME.
func TestNATSContexts(t *testing.T) {
	const token = "ctx-t0ken-4242"
	srv := natstest.RunServerWith(t, func(o *server.Options) { o.Authorization = token })
	other := natstest.RunServerWith(t, func(o *server.Options) { o.Authorization = "another-token-77" })
	config := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", config)
	t.Setenv("SAGA_NATS_URL", "")
	id := capsuletest.NewID()

	writeContext(t, config, "prod", `{"description":"the real one","url":"`+srv.ClientURL()+`","token":"`+token+`","jetstream_domain":""}`, true)
	writeContext(t, config, "other", `{"url":"`+other.ClientURL()+`","token":"wrong"}`, false)

	r := run(t, "status", id)
	require.Equal(t, connected, r.errOut, "the selected context")
	require.NotContains(t, r.errOut+r.out, token)

	r = run(t, "--context", "other", "status", id)
	require.Contains(t, r.errOut, "Authorization Violation")
	require.Contains(t, r.errOut, `(settings from the NATS context "other")`)

	r = run(t, "--context", "other", "--nats-url", srv.ClientURL(), "status", id)
	require.Contains(t, r.errOut, "Authorization Violation", "flags over the context's URL, its token kept")

	r = run(t, "--nats-url", other.ClientURL(), "status", id)
	require.Contains(t, r.errOut, "Authorization Violation", "a URL given: the selected context is not used")
	require.NotContains(t, r.errOut, "NATS context")

	r = run(t, "--context", "nope", "status", id)
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.errOut, `nats context "nope": no such context`)

	r = run(t, "--context", "../prod", "status", id)
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.errOut, "is not a context name")
}
