package pipeline_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/sagatest"
	"github.com/sagad/sagad/store"
)

// TestResultKeptWhileWritesFail: while an executor runs, JetStream starts
// refusing sagad's writes (here the artifact and checkpoint streams refuse
// every message as too large, as a full disk refuses everything), so what
// the executor produced cannot be recorded. A live sagad keeps the result
// and its claim, records it once writes succeed again, and never calls the
// executor a second time.
func TestResultKeptWhileWritesFail(t *testing.T) {
	t.Parallel()
	calls := new(atomic.Int64)
	gate := make(chan struct{})
	f := setupWith(t, func(c *pipeline.Config) {
		c.Executors.RegisterExecutor("gated", sagatest.CountingStub{N: calls, Gate: gate})
	})
	ctx := context.Background()
	doc := f.own(t, capsuletest.New().Set("task.kind", "gated"))
	f.publish(t, doc.Sealed(t))
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool { return calls.Load() == 1 }, "the executor never ran")

	limit := func(stream string, size int32) {
		t.Helper()
		s, err := f.js.Stream(ctx, stream)
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		cfg := info.Config
		cfg.MaxMsgSize = size
		_, err = f.js.UpdateStream(ctx, cfg)
		require.NoError(t, err)
	}
	streams := []string{"OBJ_" + store.ArtifactsBucket, "KV_" + store.ArtifactRecordsBucket, "KV_" + store.CheckpointsBucket}
	for _, s := range streams {
		limit(s, 8)
	}
	gate <- struct{}{} // the executor returns; nothing it produced can be written
	// Longer than the message's ack wait and the claim's lease: only the
	// heartbeat's progress reports keep the message from being redelivered.
	time.Sleep(3 * f.cfg.AckWait / 2)
	require.Equal(t, int64(1), calls.Load())
	for _, s := range streams {
		limit(s, -1)
	}

	s := f.wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State)
	require.Equal(t, int64(1), calls.Load(), "the executor ran once: its result was kept and recorded late")
}
