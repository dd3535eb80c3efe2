package daemon

import (
	"bytes"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/natsconn"
)

// TestChainExampleRuns runs examples/chain as its README does, against a
// running sagad with the operator's credentials: sagad composes the chain,
// every step completes, and sagactl chain shows them.
func TestChainExampleRuns(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../../..")
	require.NoError(t, err)
	dataDir := t.TempDir()
	cfg, err := parseConfig([]string{
		"--config", filepath.Join(root, "examples", "chain", "sagad.json"),
		"--nats-listen", "127.0.0.1:-1", "--data-dir", dataDir, "--workspace", root,
		"--http-listen", "off", "--log-level", "warn", "--shutdown-timeout", "10s",
	}, envOf(nil), io.Discard)
	require.NoError(t, err)
	d := start(t, cfg)
	ctl := func(args ...string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := cli.Main(append([]string{"--nats-url", d.url, "--nats-nkey", filepath.Join(CredsDir(dataDir), RoleOperator+natsconn.SeedExt)}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, out, errOut := ctl("publish", "--chain", filepath.Join(root, "examples", "chain", "chain.json"))
	require.Equal(t, cli.ExitOK, code, errOut)
	ids := strings.Fields(out)
	require.Len(t, ids, 3)
	code, out, errOut = ctl("wait", ids[2], "--timeout", "60s")
	require.Equal(t, cli.ExitOK, code, "%s%s", out, errOut)

	code, out, errOut = ctl("chain", "contract-fr-2030", "-o", "json")
	require.Equal(t, cli.ExitOK, code, errOut)
	var ch client.Chain
	require.NoError(t, json.Unmarshal([]byte(out), &ch))
	require.Len(t, ch.Steps, 3)
	for i, s := range ch.Steps {
		require.Equal(t, ids[i], s.CapsuleID)
		require.Equal(t, capsule.Completed, s.State, "step %d: %s", i, s.HaltReason)
	}

	// The same document again: the same ids, nothing new.
	code, out, errOut = ctl("publish", "--chain", filepath.Join(root, "examples", "chain", "chain.json"))
	require.Equal(t, cli.ExitOK, code, errOut)
	require.Equal(t, ids, strings.Fields(out))
}
