package sagatest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/internal/capsuletest"
)

// WaveDoc is a capsule of wave with a 1,000-token cap whose executor (kind,
// "slow" waits for the bundle's gate) and reviewer use 500 tokens in all.
func (b *Bundle) WaveDoc(t *testing.T, wave, kind string) capsuletest.Doc {
	t.Helper()
	return b.Own(t, capsuletest.New().Set("wave_id", wave).Set("task.kind", kind).Set("budget.tokens", 1000).Stub(map[string]any{
		"usage":        map[string]any{"tokens": 400, "dollars": 0.01},
		"review_usage": map[string]any{"tokens": 100, "dollars": 0.01},
	}))
}

// Wave reads the wave's record, which must exist.
func (b *Bundle) Wave(t *testing.T, id string) budget.Wave {
	t.Helper()
	w, ok, err := b.Store.Budgets.Wave(context.Background(), id)
	require.NoError(t, err)
	require.True(t, ok)
	return w
}
