package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
)

// modelsConfig writes a sagad config file with a model executor "write" and
// tiers, one of whose models has no price.
func modelsConfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sagad.json")
	require.NoError(t, os.WriteFile(p, []byte(`{
  "log_level": "info",
  "executors": {"write": {"type": "openai", "model": "low-tier", "base_url": "http://127.0.0.1:1/v1/"}},
  "models": {
    "tiers": {"low-tier": "small-1", "high-tier": "big-1"},
    "prices": {"small-1": {"input_per_mtok": 0.5, "output_per_mtok": 1.5}}
  }
}`), 0o600))
	return p
}

func TestModelsCommand(t *testing.T) {
	t.Parallel()
	cfg := modelsConfig(t)
	r := run(t, "models", "--config", cfg)
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	for _, want := range []string{"low-tier", "small-1", "0.5", "1.5", "big-1", "no price: tokens only", "executor", "write"} {
		assert.Contains(t, r.out, want)
	}

	r = run(t, "models", "--config", cfg, "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var rep cli.ModelsReport
	require.NoError(t, json.Unmarshal([]byte(r.out), &rep))
	assert.Equal(t, []string{"big-1"}, rep.Unpriced)
	require.Len(t, rep.Endpoints, 1)
	assert.Equal(t, cli.ModelEndpoint{Role: "executor", Key: "write", Type: "openai", Model: "low-tier", ModelID: "small-1", BaseURL: "http://127.0.0.1:1/v1/"}, rep.Endpoints[0])

	bad := file(t, []byte(`{"models": {"prices": {"m": {"input_per_mtok": -1, "output_per_mtok": 1}}}}`))
	r = run(t, "models", "--config", bad)
	require.Equal(t, cli.ExitFailure, r.code)
	assert.Contains(t, r.errOut, "input_per_mtok")

	r = run(t, "models", "--config", cfg, "extra")
	require.Equal(t, cli.ExitUsage, r.code)
}

// TestModelsAsksSagad: without --config, models is a request to the
// running sagad's admin service (cmd/internal/daemon's TestModelsInForce
// runs it against one): where NATS answers but no sagad does, it exits 6
// as every admin command; with no NATS at all, 1.
func TestModelsAsksSagad(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	r := run(t, "--nats-url", s.ClientURL(), "models", "-o", "json")
	require.Equal(t, cli.ExitNoSagad, r.code, r.out+r.errOut)
	require.Empty(t, r.out)
	require.Equal(t, "sagactl: no sagad answered on saga.admin.models: is sagad running?\n", r.errOut)

	o := offline("models")
	require.Equal(t, cli.ExitFailure, o.code, o.out+o.errOut)
	require.Contains(t, o.errOut, "is sagad running?")
}

// TestCheckTaskModel: sagactl check judges task.model offline by the
// config's models, and takes Rule 22's kinds from it.
func TestCheckTaskModel(t *testing.T) {
	t.Parallel()
	cfg := modelsConfig(t)
	ok := file(t, capsuletest.New().Set("task.kind", "write").Set("task.model", "high-tier").Sealed(t))
	r := run(t, "check", "--config", cfg, ok)
	require.Equal(t, cli.ExitOK, r.code, r.out+r.errOut)

	unknown := file(t, capsuletest.New().Set("task.kind", "write").Set("task.model", "mega-tier").Sealed(t))
	r = run(t, "check", "--config", cfg, unknown)
	require.Equal(t, cli.ExitFailure, r.code, r.out)
	assert.Contains(t, r.out, "would halt: model_not_allowed:mega-tier")
	assert.Contains(t, r.out, "allowed: big-1, high-tier, low-tier, small-1")

	r = run(t, "check", ok)
	require.Equal(t, cli.ExitFailure, r.code, "without --config no model is allowed")
	assert.Contains(t, r.out, "model_not_allowed:high-tier")

	r = run(t, "check", "--config", filepath.Join(t.TempDir(), "none.json"), ok)
	require.Equal(t, cli.ExitUsage, r.code)
}
