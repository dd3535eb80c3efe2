package daemon

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeConfigFile: a config file never panics the decoder, the
// defaults or the validation (executor endpoints included), and what decodes
// encodes to a file that decodes to the same Config (durations exactly). Seeds: the example
// config, below, and testdata/fuzz/FuzzDecodeConfigFile.
func FuzzDecodeConfigFile(f *testing.F) {
	example, err := os.ReadFile("../../../examples/sagad.json")
	require.NoError(f, err)
	f.Add(example)
	for _, s := range []string{
		`{}`, `{"workers":-1,"log_level":"loud"}`, `{"retention":"-1ns","lock_wait":"1h2m3.5s"}`,
		`{"shutdown_timeout":30}`, `{"shutdown_timeout":null}`, `{"unknown":1}`, `{} {}`, `[]`,
		`{"executors":{"x":{"type":"command","command":[],"timeout":"-1s","retries":11,"max_output":-5}}}`,
		`{"reviewers":{"r":{"type":"nats","subject":"a.*","backoff":"1x"}}}`,
		`{"default_reviewer":"stub-reviewer","constitution":{"deny_paths":[],"horizon":"1h30m","max_dollars":2.5,"allowed_hosts":null}}`,
		`{"constitution":{"horizon":"-1s","max_tokens":-1}}`, `{"constitution":null}`, `{"constitution":{"x":1}}`,
		`{"executors":{"m":{"type":"openai","model":"low-tier","headers":{},"temperature":3}},"models":{"tiers":{},"prices":{"p":{"input_per_mtok":1,"output_per_mtok":2,"cache_read_per_mtok":null}}}}`,
		`{"reviewers":{"r":{"type":"anthropic","model":"m","api_key_file":"/nonexistent","stream":true}},"models":{"tiers":{"low-tier":"low-tier"}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := decodeConfigFile(b)
		if err != nil {
			require.Equal(t, Config{}, cfg)
			return
		}
		enc, err := json.Marshal(cfg)
		require.NoError(t, err)
		back, err := decodeConfigFile(enc)
		require.NoError(t, err, "%s", enc)
		// One encoding normalises (omitempty drops an empty list); from
		// there, encoding and decoding is the identity.
		again, err := json.Marshal(back)
		require.NoError(t, err)
		require.Equal(t, string(enc), string(again))
		durations := func(c Config) []Duration {
			return []Duration{c.ShutdownTimeout, c.LockWait, c.DeadlineWarning, c.ExternalTimeout, c.Retention}
		}
		require.Equal(t, durations(cfg), durations(back))

		cfg.withDefaults()
		_ = cfg.validate()
	})
}
