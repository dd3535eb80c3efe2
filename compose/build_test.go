package compose_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/store"
)

// TestChainExample: examples/chain builds three sealed capsules, each after
// the first depending on the one before and reading its final artifact, and
// its sagad config serves every step kind.
func TestChainExample(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../examples/chain/chain.json")
	require.NoError(t, err)
	doc, err := compose.Parse(b)
	require.NoError(t, err)
	require.Equal(t, "contract-fr-2030", doc.ID)
	require.True(t, doc.Chain)
	ids, err := compose.NewStepIDs(len(doc.Steps))
	require.NoError(t, err)
	raws, digests, err := doc.Build(ids, 1)
	require.NoError(t, err)
	require.Len(t, raws, 3)

	cfgBytes, err := os.ReadFile("../examples/chain/sagad.json")
	require.NoError(t, err)
	var cfg executors.Config
	require.NoError(t, json.Unmarshal(cfgBytes, &cfg))
	require.NoError(t, cfg.Validate())
	kinds, _ := cfg.Names()

	for i, raw := range raws {
		require.NoError(t, capsule.VerifyIntegrity(raw))
		var c capsule.Capsule
		require.NoError(t, json.Unmarshal(raw, &c))
		require.Equal(t, ids[i], c.CapsuleID)
		require.Equal(t, digests[i], c.Integrity.SHA256)
		require.Equal(t, &capsule.ChainRound{ID: doc.ID, Step: i}, c.Chain)
		require.Contains(t, kinds, c.Task.Kind)
		if i == 0 {
			require.Empty(t, c.DependsOn)
			require.Equal(t, []string{"file:examples/chain/README.md"}, c.ContextRefs)
			continue
		}
		require.Equal(t, []string{ids[i-1]}, c.DependsOn)
		require.Equal(t, []string{"file:examples/chain/README.md", "artifact:" + ids[i-1] + "/final"}, c.ContextRefs)
	}

	// The same document and ids build the same bytes: composing again is
	// idempotent.
	again, _, err := doc.Build(ids, 1)
	require.NoError(t, err)
	require.Equal(t, raws, again)
}

// TestStepIDsUnguessable: step ids are canonical UUIDs, never the same
// twice, whatever the chain, and of the form RECEPTION looks up as
// reserved (store.StepIDForm).
func TestStepIDsUnguessable(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		ids, err := compose.NewStepIDs(3)
		require.NoError(t, err)
		for _, id := range ids {
			c, ok := capsule.CanonicalID(id)
			require.True(t, ok, id)
			require.Equal(t, id, c)
			require.True(t, store.StepIDForm(id), id)
			require.False(t, seen[id])
			seen[id] = true
		}
	}
}
