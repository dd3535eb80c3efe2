package maintenance_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/locks"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/sagatest"
	"github.com/sagad/sagad/store"
)

// TestLockContention: a capsule whose lock another holder keeps parks with
// lock_contention and resumes by itself once the lock is free.
func TestLockContention(t *testing.T) {
	t.Parallel()
	f := sagatest.Run(t, func(c *pipeline.Config) {
		c.LockWait = 300 * time.Millisecond
		c.SweepInterval = 50 * time.Millisecond
	})
	a := f.Admin(t)
	ctx := context.Background()
	require.NoError(t, a.PausePhase(ctx, capsule.Execution))
	doc := f.Own(t, capsuletest.New())
	f.Publish(t, doc.Sealed(t))
	// Queued at EXECUTION: its message waits there (the checkpoint shows
	// PLANNING until EXECUTION writes the deferred advances).
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return f.PhaseConsumer(t, capsule.Execution).NumPending == 1
	}, "queued at EXECUTION")
	lm, err := locks.New(ctx, f.JS, locks.Config{})
	require.NoError(t, err)
	path := "own-" + doc.ID() + ".txt"
	require.NoError(t, lm.TryAcquire(ctx, path, "someone-else"))
	require.NoError(t, a.ResumePhase(ctx, capsule.Execution))
	f.WaitState(t, doc.ID(), capsule.Paused)
	f.RequireContinuation(t, doc.ID(), capsule.TriggerLockContention, capsule.Execution)
	require.Equal(t, int64(0), f.Executed.Load())
	require.NoError(t, lm.Release(ctx, path, "someone-else"))
	f.WaitState(t, doc.ID(), capsule.Completed)
	require.Equal(t, int64(1), f.Executed.Load())
}

// TestAcceptedWorkCompletesLater: an executor that answers "accepted" parks
// the capsule (locks kept); the result on the completion subject resumes it
// without running the executor again; a second result is ignored.
func TestAcceptedWorkCompletesLater(t *testing.T) {
	t.Parallel()
	f := sagatest.Run(t, nil)
	ctx := context.Background()
	doc := f.Own(t, capsuletest.New().Set("task.kind", "accepting"))
	f.Publish(t, doc.Sealed(t))
	s := f.WaitState(t, doc.ID(), capsule.Paused)
	require.Equal(t, int(capsule.Execution), s.Phase)
	lm, err := locks.New(ctx, f.JS, locks.Config{})
	require.NoError(t, err)
	holder, err := lm.Holder(ctx, "own-"+doc.ID()+".txt")
	require.NoError(t, err)
	require.Equal(t, doc.ID(), holder, "locks stay held while the work runs elsewhere")

	result := f.Completion(t, `{"kind":"execute","status":"ok","content":{"answer":42},"usage":{"tokens":5,"dollars":0.001}}`)
	_, err = f.JS.Publish(ctx, executors.CompletionSubject(doc.ID(), 1), result)
	require.NoError(t, err)
	s = f.WaitState(t, doc.ID(), capsule.Completed)
	require.Equal(t, int64(1), f.Executed.Load())
	b, err := f.Store.Artifacts.Bytes(ctx, store.ArtifactRef(doc.ID(), 1))
	require.NoError(t, err)
	var art capsule.Artifact
	require.NoError(t, json.Unmarshal(b, &art))
	require.JSONEq(t, `{"answer":42}`, string(art.Content))

	_, err = f.JS.Publish(ctx, executors.CompletionSubject(doc.ID(), 1), result)
	require.NoError(t, err)
	f.WaitCompletionsDrained(t)
	after, err := f.Client.Status(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, s.History, after.History)
}

// TestExternalResultOverdue halts a capsule whose accepted work never reports.
func TestExternalResultOverdue(t *testing.T) {
	t.Parallel()
	f := sagatest.Run(t, func(c *pipeline.Config) {
		c.ExternalTimeout = 300 * time.Millisecond
		c.SweepInterval = 50 * time.Millisecond
	})
	doc := f.Own(t, capsuletest.New().Set("task.kind", "accepting"))
	f.Publish(t, doc.Sealed(t))
	s := f.Wait(t, doc.ID())
	for s.State == capsule.Paused {
		s = f.WaitState(t, doc.ID(), capsule.Halted)
	}
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, "executor_failed:no result for cycle 1 within 300ms", s.HaltReason)
}

// TestEndpointCompletionTimeout: an endpoint's completion_timeout, not the
// daemon's --external-timeout, decides when its accepted work is overdue.
func TestEndpointCompletionTimeout(t *testing.T) {
	t.Parallel()
	f := sagatest.Run(t, func(c *pipeline.Config) {
		c.ExternalTimeout = time.Hour
		c.SweepInterval = 50 * time.Millisecond
		c.Executors.RegisterExecutor("accepting-briefly", sagatest.AcceptingStub{N: new(atomic.Int64), Timeout: 300 * time.Millisecond})
	})
	doc := f.Own(t, capsuletest.New().Set("task.kind", "accepting-briefly"))
	f.Publish(t, doc.Sealed(t))
	s := f.Wait(t, doc.ID())
	for s.State == capsule.Paused {
		s = f.WaitState(t, doc.ID(), capsule.Halted)
	}
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, "executor_failed:no result for cycle 1 within 300ms", s.HaltReason)
}
