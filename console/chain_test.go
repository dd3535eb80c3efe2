package console

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
)

// TestConsoleChainFilter: a chain step's row carries its chain, and the
// list filters by chain id.
func TestConsoleChainFilter(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	step := f.publish(t, capsuletest.New().Set("chain", map[string]any{"id": "c-1", "step": 0}))
	other := f.publish(t, capsuletest.New().Set("target", "file:go.mod").Set("constraints.resource_locks_required", []any{"go.mod"}))
	f.wait(t, step, capsule.Completed)
	f.wait(t, other, capsule.Completed)

	var page Page
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/capsules?chain=c-1", &page))
	require.Equal(t, 1, page.Total)
	require.Equal(t, step, page.Items[0].CapsuleID)
	require.Equal(t, &capsule.ChainStep{ID: "c-1", Step: 0}, page.Items[0].Chain)
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/capsules?chain=c-2", &page))
	require.Zero(t, page.Total)
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/capsules", &page))
	require.Equal(t, 2, page.Total)
}
