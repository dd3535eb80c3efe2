package capsule_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

// TestChainStepID: a step's id is a canonical UUID, the same for the same
// chain and step, different for any other.
func TestChainStepID(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, chain := range []string{"a", "b", "report-42", "a\x000"} {
		for step := 0; step < 10; step++ {
			id := capsule.ChainStepID(chain, step)
			canon, ok := capsule.CanonicalID(id)
			require.True(t, ok, id)
			require.Equal(t, canon, id)
			require.Equal(t, byte('8'), id[14], "version 8")
			require.Equal(t, id, capsule.ChainStepID(chain, step))
			require.False(t, seen[id], "%s/%d", chain, step)
			seen[id] = true
		}
	}
}
