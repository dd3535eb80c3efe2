package daemon

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKVBucketsConfig: kv_buckets comes from the config file, lists none by
// default, and may not name sagad's own buckets.
func TestKVBucketsConfig(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig(nil, envOf(nil), io.Discard)
	require.NoError(t, err)
	require.Empty(t, cfg.KVBuckets)

	cfg, err = parseConfig([]string{"--config", writeConfig(t, `{"kv_buckets": ["CONFIG", "team_refs"]}`)}, envOf(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{"CONFIG", "team_refs"}, cfg.KVBuckets)

	_, err = parseConfig([]string{"--config", writeConfig(t, `{"kv_buckets": ["SAGA_CHECKPOINTS"]}`)}, envOf(nil), io.Discard)
	require.ErrorContains(t, err, "kv_buckets: SAGA_CHECKPOINTS is sagad's own bucket")
}
