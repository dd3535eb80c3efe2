package natsconn_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/natsconn"
)

func TestDecodeContext(t *testing.T) {
	t.Parallel()
	env := func(k string) string { return map[string]string{"HOME": "/home/op"}[k] }
	tests := []struct {
		name    string
		body    string
		want    natsconn.Options
		wantErr string
	}{
		{
			name: "what nats context save writes",
			body: `{"description":"","url":"nats://a:4222,nats://b:4222","token":"","user":"","password":"","creds":"~/ops.creds","nkey":"","cert":"","key":"","ca":"/etc/ca.pem","nsc":"","jetstream_domain":"hub","jetstream_api_prefix":"","jetstream_event_prefix":"","inbox_prefix":"","user_jwt":"","color_scheme":""}`,
			want: natsconn.Options{URL: "nats://a:4222,nats://b:4222", Creds: "/home/op/ops.creds", TLSCA: "/etc/ca.pem"},
		},
		{name: "user and password", body: `{"url":"nats://a:4222","user":"u","password":"p"}`, want: natsconn.Options{URL: "nats://a:4222", User: "u", Password: "p"}},
		{name: "token", body: `{"token":"t"}`, want: natsconn.Options{Token: "t"}},
		{name: "nkey and mutual TLS", body: `{"nkey":"/k.nk","cert":"~/c.pem","key":"~/k.pem"}`, want: natsconn.Options{NKey: "/k.nk", TLSCert: "/home/op/c.pem", TLSKey: "/home/op/k.pem"}},
		{name: "nsc lookup", body: `{"nsc":"nsc://op/acc/user"}`, wantErr: "nsc"},
		{name: "two ways to authenticate", body: `{"user":"u","creds":"/c"}`, wantErr: "choose one way to authenticate"},
		{name: "not JSON", body: `url=nats://a`, wantErr: "not a context file"},
		{name: "not an object", body: `["nats://a"]`, wantErr: "not a context file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := natsconn.DecodeContext([]byte(tt.body), env)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestLoadContext(t *testing.T) {
	t.Parallel()
	config := t.TempDir()
	env := func(k string) string { return map[string]string{"XDG_CONFIG_HOME": config}[k] }
	_, ok, err := natsconn.LoadContext("", env)
	require.NoError(t, err)
	require.False(t, ok, "none selected: none")

	dir := filepath.Join(config, "nats", "context")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ops.json"), []byte(`{"url":"nats://ops:4222"}`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(config, "nats", "context.txt"), []byte("ops\n"), 0o600))
	ctx, ok, err := natsconn.LoadContext("", env)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "ops", ctx.Name)
	require.Equal(t, "nats://ops:4222", ctx.Options.URL)

	ctx, ok, err = natsconn.LoadContext("ops", env)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, filepath.Join(dir, "ops.json"), ctx.Path)

	for _, bad := range []string{"../ops", "a/b", `a\b`, "missing"} {
		_, _, err := natsconn.LoadContext(bad, env)
		require.ErrorIs(t, err, natsconn.ErrContext, bad)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "big.json"), make([]byte, 70<<10), 0o600))
	_, _, err = natsconn.LoadContext("big", env)
	require.ErrorContains(t, err, "not a context")

	home := func(k string) string { return map[string]string{"HOME": "/home/op"}[k] }
	d, err := natsconn.ContextDir(home)
	require.NoError(t, err)
	require.Equal(t, "/home/op/.config/nats", d)
}

// FuzzDecodeContext: any bytes in a context file give settings or an
// error, never a panic; settings given are ones Validate accepts.
func FuzzDecodeContext(f *testing.F) {
	for _, seed := range []string{
		`{"url":"nats://a:4222","token":"t"}`,
		`{"user":"u","password":"p","creds":"/c"}`,
		`{"creds":"~/x.creds","cert":"~/c","key":"~/k","ca":"~/ca"}`,
		`{"nsc":"nsc://o/a/u"}`,
		`{"url":1}`, `null`, `[]`, `{`, "",
	} {
		f.Add([]byte(seed))
	}
	env := func(k string) string { return map[string]string{"HOME": "/h"}[k] }
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := natsconn.DecodeContext(b, env)
		if err != nil {
			return
		}
		require.NoError(t, o.Validate())
	})
}
