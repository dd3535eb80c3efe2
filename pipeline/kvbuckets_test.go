package pipeline

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestValidateKVBuckets: sagad's own buckets and malformed names cannot be
// listed for kv: refs.
func TestValidateKVBuckets(t *testing.T) {
	t.Parallel()
	require.NoError(t, ValidateKVBuckets(nil))
	require.NoError(t, ValidateKVBuckets([]string{"CONFIG", "team-a_refs"}))
	require.ErrorContains(t, ValidateKVBuckets([]string{"SAGA_CHECKPOINTS"}), "sagad's own bucket")
	require.ErrorContains(t, ValidateKVBuckets([]string{"saga_locks"}), "sagad's own bucket")
	require.ErrorContains(t, ValidateKVBuckets([]string{"a.b"}), "no KV bucket name")
	require.ErrorContains(t, ValidateKVBuckets([]string{""}), "no KV bucket name")
}
