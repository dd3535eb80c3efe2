package daemon

import (
	"bytes"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
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
