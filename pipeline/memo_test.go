package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/locks"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// caughtUpRuns is how many times f's pipeline ran PLANNING and
// AUTOMATED_GATES at a deferred catch-up.
func caughtUpRuns(f *fixture) [2]int64 {
	return [2]int64{
		pipeline.CaughtUpRuns(f.pipe, capsule.Planning),
		pipeline.CaughtUpRuns(f.pipe, capsule.AutomatedGates),
	}
}

// TestDeferredMemoAsWritten holds the memo of deferred decisions to the
// routine it replaces (the catch-up runs every deferred phase again): the
// same capsules end the same way with the same histories and findings,
// and with the memo no catch-up runs PLANNING or AUTOMATED_GATES, where
// without it PLANNING runs at AUTOMATED_GATES' catch-up and both at
// EXECUTION's.
func TestDeferredMemoAsWritten(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		doc  func() capsuletest.Doc
		// runs and memoRuns are the catch-ups' runs of PLANNING and
		// AUTOMATED_GATES without the memo and with it.
		runs, memoRuns [2]int64
	}{
		{"valid", capsuletest.New, [2]int64{2, 1}, [2]int64{0, 0}},
		{"spec not approved", func() capsuletest.Doc { return capsuletest.New().Set("spec.approved", false) }, [2]int64{0, 0}, [2]int64{0, 0}},
		// AUTOMATED_GATES halts, so it writes: its catch-up assumed
		// REALITY_ANCHOR's advance, and the attempt made again eagerly
		// (deferred.go, lazy) finds PLANNING's note taken by the first.
		{"rule violated at the gates", func() capsuletest.Doc {
			return capsuletest.New().Set("review.reviewer_agent_id", "agent-nobody")
		}, [2]int64{2, 0}, [2]int64{1, 0}},
		{"two review cycles", func() capsuletest.Doc {
			return capsuletest.New().Stub(map[string]any{"reviews": []any{"CHANGES_REQUESTED"}})
		}, [2]int64{2, 1}, [2]int64{0, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			run := func(memo bool) (client.Status, [2]int64) {
				f := setupWith(t, func(c *pipeline.Config) {
					if !memo {
						pipeline.WithoutMemo(c)
					}
				})
				raw := tc.doc().Sealed(t)
				f.publish(t, raw)
				s := f.wait(t, idOf(t, raw))
				require.Zero(t, pipeline.MemoLen(f.pipe), "every note was taken")
				require.Zero(t, pipeline.AdvancesLen(f.pipe), "every applied advance was taken by the write")
				return s, caughtUpRuns(f)
			}
			written, runsWritten := run(false)
			memo, runsMemo := run(true)
			requireSameHistory(t, written, memo)
			require.Equal(t, written.Phase, memo.Phase)
			require.Equal(t, written.Findings, memo.Findings)
			require.Equal(t, written.CyclesUsed, memo.CyclesUsed)
			require.Equal(t, tc.runs, runsWritten, "the catch-ups without the memo")
			require.Equal(t, tc.memoRuns, runsMemo, "the catch-ups with the memo")
		})
	}
}

// TestDeferredMemoNotAcrossAWrite: a checkpoint written between the
// deferring phase and the catch-up (here the same value again, as another
// sagad's write that changes nothing visible would be, seen by this
// process's cache) is a new revision: the memo's notes were taken on
// another one, and the catch-up decides PLANNING and AUTOMATED_GATES again.
func TestDeferredMemoNotAcrossAWrite(t *testing.T) {
	t.Parallel()
	f := setupWith(t, func(c *pipeline.Config) { c.NoPauseView = true })
	ctx := context.Background()
	a := f.admin(t)
	require.NoError(t, a.PausePhase(ctx, capsule.Execution))
	raw := capsuletest.New().Sealed(t)
	id := idOf(t, raw)
	f.publish(t, raw)
	queued(t, f, capsule.Execution, 1)
	require.Equal(t, 2, pipeline.MemoLen(f.pipe), "PLANNING's and AUTOMATED_GATES' advances noted")

	kv, err := f.js.KeyValue(ctx, store.CheckpointsBucket)
	require.NoError(t, err)
	e, err := kv.Get(ctx, id)
	require.NoError(t, err)
	_, err = kv.Update(ctx, id, e.Value(), e.Revision())
	require.NoError(t, err)
	st, err := store.Open(ctx, f.js)
	require.NoError(t, err)
	cp, rev, err := st.Checkpoints.Get(ctx, id)
	require.NoError(t, err)
	require.Greater(t, rev, e.Revision())
	pipeline.CacheOf(f.pipe).Put(cp, rev)

	require.NoError(t, a.ResumePhase(ctx, capsule.Execution))
	requireSevenPhases(t, f.wait(t, id))
	require.Equal(t, [2]int64{1, 1}, caughtUpRuns(f), "EXECUTION's catch-up decided both again")
	require.Equal(t, 2, pipeline.MemoLen(f.pipe), "the notes of the old revision are left to eviction")
	require.Equal(t, int64(1), f.executed.Load())
	requireOutcomes(t, f, 1)
}

// TestDeferredMemoNotAcrossProcesses: the sagad that catches up is not
// the one that deferred (it stopped, or died, with the capsule queued at
// EXECUTION): its memo holds nothing of the capsule, and its catch-up
// decides PLANNING and AUTOMATED_GATES itself, as before the memo.
func TestDeferredMemoNotAcrossProcesses(t *testing.T) {
	t.Parallel()
	f := setupWith(t, func(c *pipeline.Config) { c.NoPauseView = true })
	ctx := context.Background()
	a := f.admin(t)
	require.NoError(t, a.PausePhase(ctx, capsule.Execution))
	raw := capsuletest.New().Sealed(t)
	id := idOf(t, raw)
	f.publish(t, raw)
	queued(t, f, capsule.Execution, 1)
	require.Equal(t, 2, pipeline.MemoLen(f.pipe))

	second := f.start(t, f.cfg)
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	f.pipe.Stop(stopCtx)
	cancel()
	f.pipe = second
	require.NoError(t, a.ResumePhase(ctx, capsule.Execution))
	requireSevenPhases(t, f.wait(t, id))
	require.Equal(t, [2]int64{1, 1}, caughtUpRuns(f), "the second sagad decided both")
	require.Equal(t, int64(1), f.executed.Load())
	requireOutcomes(t, f, 1)
}

// TestDeferredMemoTakenOnce: a catch-up that takes the notes and then does
// not write (EXECUTION finds its lock held by someone else and tries again
// later) leaves nothing for the redelivery, which decides PLANNING and
// AUTOMATED_GATES again, as every delivery did before the memo.
func TestDeferredMemoTakenOnce(t *testing.T) {
	t.Parallel()
	f := setupWith(t, func(c *pipeline.Config) {
		c.NoPauseView = true
		c.LockWait = 10 * time.Second // tries again after a second
	})
	ctx := context.Background()
	a := f.admin(t)
	// RECEPTION refuses a capsule whose lock is held: take it once the
	// capsule is queued at EXECUTION.
	require.NoError(t, a.PausePhase(ctx, capsule.Execution))
	doc := f.own(t, capsuletest.New())
	f.publish(t, doc.Sealed(t))
	queued(t, f, capsule.Execution, 1)
	require.Equal(t, 2, pipeline.MemoLen(f.pipe))
	lm, err := locks.New(ctx, f.js, locks.Config{})
	require.NoError(t, err)
	path := "own-" + doc.ID() + ".txt"
	require.NoError(t, lm.TryAcquire(ctx, path, "someone-else"))

	require.NoError(t, a.ResumePhase(ctx, capsule.Execution))
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		return caughtUpRuns(f)[1] > 0
	}, "EXECUTION was never redelivered")
	require.Zero(t, pipeline.MemoLen(f.pipe), "the first delivery took both notes")
	require.NoError(t, lm.Release(ctx, path, "someone-else"))
	requireSevenPhases(t, f.wait(t, doc.ID()))
	runs := caughtUpRuns(f)
	require.Equal(t, runs[0], runs[1], "every redelivery decided both")
	require.Equal(t, int64(1), f.executed.Load())
	requireOutcomes(t, f, 1)
}
