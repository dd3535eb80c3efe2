package daemon

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natsconn"
)

// TestModelExampleConfigs: examples/models' configs are valid sagad config
// files whose model endpoints build, and sagad warns once, at start, of
// each model without a price. Not parallel: it changes directory (the
// examples name files from the repository root) and sets the keys'
// variables.
func TestModelExampleConfigs(t *testing.T) {
	t.Chdir("../../..")
	t.Setenv("OPENAI_API_KEY", "sk-example")
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-example")
	for _, name := range []string{"examples/models/local-openai.json", "examples/models/anthropic.json"} {
		cfg, err := parseConfig([]string{"--config", name}, envOf(nil), io.Discard)
		require.NoError(t, err, name)
		_, err = cfg.buildExecutors(nil, false)
		require.NoError(t, err, name)
		var logs bytes.Buffer
		cfg.warnUnpriced(slog.New(slog.NewTextHandler(&logs, nil)))
		require.Empty(t, logs.String(), "%s prices every model it calls", name)
	}

	cfg, err := parseConfig([]string{"--config", writeConfig(t, `{
  "executors": {"w": {"type": "openai", "model": "local-llm", "base_url": "http://127.0.0.1:1/v1/"}},
  "models": {"tiers": {"low-tier": "small"}, "prices": {"small": {"input_per_mtok": 1, "output_per_mtok": 2}}}
}`)}, envOf(nil), io.Discard)
	require.NoError(t, err)
	var logs bytes.Buffer
	cfg.warnUnpriced(slog.New(slog.NewTextHandler(&logs, nil)))
	require.Contains(t, logs.String(), "level=WARN msg=\"model has no price in models.prices: its calls charge tokens only\" model=local-llm")
	require.Equal(t, 1, bytes.Count(logs.Bytes(), []byte("WARN")), logs.String())

	_, err = parseConfig([]string{"--config", writeConfig(t, `{
  "executors": {"w": {"type": "anthropic", "model": "x-tier", "api_key_env": "SAGA_TEST_NO_SUCH_KEY"}},
  "models": {"prices": {"m": {"input_per_mtok": -1, "output_per_mtok": 2}}}
}`)}, envOf(nil), io.Discard)
	require.ErrorContains(t, err, `executors["w"].model: "x-tier" is not a tier of models.tiers`)
	require.ErrorContains(t, err, "api_key_env: the variable SAGA_TEST_NO_SUCH_KEY is not set or empty")
	require.ErrorContains(t, err, `models.prices["m"].input_per_mtok`)
}

// TestModelsInForce: `sagactl models` without --config asks the running
// sagad (saga.admin.models) and prints the tiers, prices and model
// endpoints of its config, with each endpoint's type, model and base URL:
// never the API key its environment holds, nor a header's value. Not
// parallel: it sets the key's variable.
func TestModelsInForce(t *testing.T) {
	const key, header = "sk-live-SECRET-0123456789", "proxy-SECRET-token"
	t.Setenv("SAGAD_TEST_MODELS_KEY", key)
	dataDir := t.TempDir()
	file := writeConfig(t, `{
  "executors": {"write": {"type": "openai", "model": "low-tier", "base_url": "http://127.0.0.1:1/v1/",
    "api_key_env": "SAGAD_TEST_MODELS_KEY", "headers": {"X-Proxy-Auth": "`+header+`"}}},
  "models": {
    "tiers": {"low-tier": "small-1", "high-tier": "big-1"},
    "prices": {"small-1": {"input_per_mtok": 0.5, "output_per_mtok": 1.5}}
  }
}`)
	cfg, err := parseConfig([]string{
		"--config", file,
		"--nats-listen", "127.0.0.1:-1", "--data-dir", dataDir, "--workspace", capsuletest.Workspace(t),
		"--http-listen", "off", "--log-level", "warn", "--shutdown-timeout", "10s",
	}, envOf(nil), io.Discard)
	require.NoError(t, err)
	d := start(t, cfg)
	ctl := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		code := cli.Main(append([]string{"--nats-url", d.url, "--nats-nkey", filepath.Join(CredsDir(dataDir), RoleOperator+natsconn.SeedExt)}, args...), &out, &errOut)
		require.Equal(t, cli.ExitOK, code, errOut.String())
		for _, secret := range []string{key, header, "X-Proxy-Auth"} {
			require.NotContains(t, out.String()+errOut.String(), secret)
		}
		return out.String()
	}
	var rep cli.ModelsReport
	require.NoError(t, json.Unmarshal([]byte(ctl("models", "-o", "json")), &rep))
	require.Equal(t, map[string]string{"low-tier": "small-1", "high-tier": "big-1"}, rep.Tiers)
	require.Equal(t, 1.5, rep.Prices["small-1"].OutputPerMTok)
	require.Equal(t, []string{"big-1"}, rep.Unpriced)
	require.Equal(t, []cli.ModelEndpoint{{Role: "executor", Key: "write", Type: "openai", Model: "low-tier", ModelID: "small-1", BaseURL: "http://127.0.0.1:1/v1/"}}, rep.Endpoints)
	// The same report as the config file read offline.
	var offline cli.ModelsReport
	require.NoError(t, json.Unmarshal([]byte(ctl("models", "--config", file, "-o", "json")), &offline))
	require.Equal(t, offline, rep)
	table := ctl("models")
	for _, want := range []string{"low-tier", "small-1", "big-1", "no price: tokens only", "write", "http://127.0.0.1:1/v1/"} {
		require.Contains(t, table, want)
	}
}
