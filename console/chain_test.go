package console

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/internal/capsuletest"
)

// TestConsoleChainFilter: a chain step's row carries its chain, and the
// list filters by chain id.
func TestConsoleChainFilter(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	composer, err := compose.Start(f.nc, f.st, compose.Config{Logger: testLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, composer.Stop()) })
	doc, err := json.Marshal(map[string]any{"chain_id": "c-1", "steps": []any{map[string]any(capsuletest.New().Delete("capsule_id"))}})
	require.NoError(t, err)
	msg, err := f.nc.Request(compose.Subject, doc, 10*time.Second)
	require.NoError(t, err)
	r, err := compose.DecodeReply(msg)
	require.NoError(t, err)
	step := r.Steps[0].CapsuleID
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
