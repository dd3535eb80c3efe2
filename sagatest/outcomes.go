package sagatest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/store"
)

// CountEvents counts the capsule's events by kind.
func (b *Bundle) CountEvents(t *testing.T, id string) map[capsule.EventKind]int {
	t.Helper()
	events, err := b.Client.History(context.Background(), id)
	require.NoError(t, err)
	kinds := map[capsule.EventKind]int{}
	for _, e := range events {
		kinds[e.Kind]++
	}
	return kinds
}

// CountOutcomes is how many messages the outcome stream holds.
func (b *Bundle) CountOutcomes(t *testing.T) uint64 {
	t.Helper()
	str, err := b.JS.Stream(context.Background(), store.OutcomesStream)
	require.NoError(t, err)
	info, err := str.Info(context.Background())
	require.NoError(t, err)
	return info.State.Msgs
}

// RequireOutcomes requires the outcome stream to hold exactly n outcomes. A
// capsule's end is recorded in its checkpoint before its outcome is
// published, so it waits for n first; a repeated outcome makes it more.
func (b *Bundle) RequireOutcomes(t *testing.T, n uint64, msgAndArgs ...any) {
	t.Helper()
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool { return b.CountOutcomes(t) >= n }, "fewer than %d outcomes", n)
	require.Equal(t, n, b.CountOutcomes(t), msgAndArgs...)
}

// Outcomes lists a status's history as "PHASE/outcome".
func Outcomes(h []client.HistoryEntry) []string {
	out := make([]string, len(h))
	for i, e := range h {
		out[i] = e.PhaseName + "/" + e.Outcome
	}
	return out
}

// EventuallyExecuted waits until the stub executors ran at least n times.
func (b *Bundle) EventuallyExecuted(t *testing.T, n int64) {
	t.Helper()
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool { return b.Executed.Load() >= n },
		"executor ran %d times, want %d", b.Executed.Load(), n)
}
