package cli

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
)

// TestChainExample: examples/chain builds three sealed capsules, each after
// the first depending on the one before and reading its final artifact, and
// its sagad config serves every step kind.
func TestChainExample(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../examples/chain/chain.json")
	require.NoError(t, err)
	chainID, ids, raws, err := buildChain(b)
	require.NoError(t, err)
	require.Equal(t, "contract-fr-2030", chainID)
	require.Len(t, raws, 3)

	cfgBytes, err := os.ReadFile("../../examples/chain/sagad.json")
	require.NoError(t, err)
	var cfg executors.Config
	require.NoError(t, json.Unmarshal(cfgBytes, &cfg))
	require.NoError(t, cfg.Validate())
	kinds, _ := cfg.Names()

	for i, raw := range raws {
		require.NoError(t, capsule.VerifyIntegrity(raw))
		var c capsule.Capsule
		require.NoError(t, json.Unmarshal(raw, &c))
		require.Equal(t, capsule.ChainStepID(chainID, i), c.CapsuleID)
		require.Equal(t, ids[i], c.CapsuleID)
		require.Equal(t, &capsule.ChainStep{ID: chainID, Step: i}, c.Chain)
		require.Contains(t, kinds, c.Task.Kind)
		if i == 0 {
			require.Empty(t, c.DependsOn)
			require.Equal(t, []string{"file:examples/chain/README.md"}, c.ContextRefs)
			continue
		}
		require.Equal(t, []string{ids[i-1]}, c.DependsOn)
		require.Equal(t, []string{"file:examples/chain/README.md", "artifact:" + ids[i-1] + "/final"}, c.ContextRefs)
	}

	// The same document builds the same bytes: publishing again is idempotent.
	_, _, again, err := buildChain(b)
	require.NoError(t, err)
	require.Equal(t, raws, again)
}
