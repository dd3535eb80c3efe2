package daemon

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/cli"
	"github.com/sagad/sagad/internal/natsconn"
)

// TestEmbeddedServerRequiresAuth: sagad writes one seed per role on first
// start (0600 in a 0700 directory), keeps them across restarts, and its
// server refuses anyone without one.
func TestEmbeddedServerRequiresAuth(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	cfg := testConfig(t, dataDir)
	d := start(t, cfg)

	_, err := nats.Connect(d.url, nats.MaxReconnects(0))
	require.ErrorIs(t, err, nats.ErrAuthorization, "an anonymous client is refused")

	dir := CredsDir(dataDir)
	info, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), info.Mode().Perm())
	seeds := map[string][]byte{}
	for _, role := range Roles {
		p := filepath.Join(dir, role+natsconn.SeedExt)
		info, err := os.Stat(p)
		require.NoError(t, err, role)
		require.Equal(t, os.FileMode(0o600), info.Mode().Perm(), role)
		seeds[role], err = os.ReadFile(p)
		require.NoError(t, err)
		nc, err := natsconn.Options{URL: d.url, NKey: p}.Connect(nats.MaxReconnects(0))
		require.NoError(t, err, "%s connects with its seed", role)
		nc.Close()
	}
	require.NoError(t, d.stop(t))

	d2 := start(t, cfg)
	for _, role := range Roles {
		b, err := os.ReadFile(filepath.Join(dir, role+natsconn.SeedExt))
		require.NoError(t, err)
		require.Equal(t, seeds[role], b, "%s's seed survives a restart", role)
	}
	require.NoError(t, d2.stop(t))
}

// TestSagactlFindsOperatorSeed: run from sagad's directory, sagactl
// publishes and waits with no credentials flag (README's commands). Not
// parallel: it changes the working directory.
func TestSagactlFindsOperatorSeed(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, filepath.Join(dir, "data"))
	d := start(t, cfg)
	t.Chdir(dir)

	doc := capsuletest.New()
	capsuleFile := filepath.Join(dir, "capsule.json")
	require.NoError(t, os.WriteFile(capsuleFile, doc.Sealed(t), 0o600))
	sagactl := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := cli.Main(append([]string{"--nats-url", d.url}, args...), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	code, out := sagactl("publish", capsuleFile)
	require.Equal(t, cli.ExitOK, code, out)
	code, out = sagactl("wait", doc.ID(), "--timeout", "30s")
	require.Equal(t, cli.ExitOK, code, out)

	require.NoError(t, os.Rename(filepath.Join(dir, "data", "creds", "operator.nk"), filepath.Join(dir, "elsewhere.nk")))
	code, out = sagactl("status", doc.ID())
	require.Equal(t, cli.ExitFailure, code)
	require.Contains(t, out, "Authorization Violation", "without the seed sagactl is refused")
	code, out = sagactl("--nats-nkey", filepath.Join(dir, "elsewhere.nk"), "status", doc.ID())
	require.Equal(t, cli.ExitOK, code, out)
}
