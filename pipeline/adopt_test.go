package pipeline_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// gatedReviewer counts reviews around the stub reviewer; with gate set,
// each review says it started and waits for a value on gate.
type gatedReviewer struct {
	n       *atomic.Int64
	started chan struct{}
	gate    chan struct{}
}

func newGatedReviewer(gated bool) gatedReviewer {
	r := gatedReviewer{n: new(atomic.Int64), started: make(chan struct{}, 8)}
	if gated {
		r.gate = make(chan struct{})
	}
	return r
}

func (r gatedReviewer) Review(ctx context.Context, req executors.ReviewRequest) (executors.ReviewResult, error) {
	r.n.Add(1)
	r.started <- struct{}{}
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return executors.ReviewResult{}, ctx.Err()
		}
	}
	return executors.StubReviewer{}.Review(ctx, req)
}

// gatedDoc is a capsule reviewed by the "gated" reviewer.
func gatedDoc() capsuletest.Doc { return capsuletest.New().Set("review.reviewer_agent_id", "gated") }

// TestReviewClaimAsWritten holds REVIEW's claim taken by EXECUTION's result
// write to the routine it replaces (NoDefer: REVIEW writes its claim): the
// same capsules end the same way with the same histories, one checkpoint
// write fewer per review cycle (and the three deferred advances).
func TestReviewClaimAsWritten(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		doc    func() capsuletest.Doc
		cycles int
	}{
		"review_2_cycles": {func() capsuletest.Doc {
			return capsuletest.New().Stub(map[string]any{"reviews": []any{"CHANGES_REQUESTED"}})
		}, 2},
		"rejected": {func() capsuletest.Doc { return capsuletest.New().Stub(map[string]any{"reviews": []any{"REJECTED"}}) }, 1},
		"3 cycles, max_cycles_exceeded": {func() capsuletest.Doc {
			return capsuletest.New().Stub(map[string]any{"reviews": []any{"CHANGES_REQUESTED", "CHANGES_REQUESTED", "CHANGES_REQUESTED"}})
		}, 3},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			written, writesWritten := checkpointWrites(t, true, tc.doc())
			adopted, writesAdopted := checkpointWrites(t, false, tc.doc())
			requireSameHistory(t, written, adopted)
			require.Equal(t, writesWritten-3-tc.cycles, writesAdopted, "no claim write of REVIEW's own in any of %d cycles", tc.cycles)
		})
	}
}

// reviewMsg returns the REVIEW message waiting in its stream (a work
// queue: kept until acknowledged).
func reviewMsg(t *testing.T, f *fixture) *nats.Msg {
	t.Helper()
	ctx := context.Background()
	s, err := f.js.Stream(ctx, store.PhaseStream(capsule.ReviewPhase))
	require.NoError(t, err)
	m, err := s.GetLastMsgForSubject(ctx, store.PhaseSubject(capsule.ReviewPhase))
	require.NoError(t, err)
	require.NotEmpty(t, m.Header.Get(store.HeaderClaim), "the REVIEW message names the claim EXECUTION's write took")
	out := nats.NewMsg(m.Subject)
	out.Header = m.Header
	return out
}

// TestReviewCopiesDoNotReviewAgain: while the first delivery of the REVIEW
// message reviews under the claim it adopted, another REVIEW message (a
// re-emit, without the claim's name) and an exact copy of the first (once
// the claim was renewed) claim by compare-and-set, find the claim held and
// wait: the reviewer is called once, the capsule completes once.
func TestReviewCopiesDoNotReviewAgain(t *testing.T) {
	t.Parallel()
	rv := newGatedReviewer(true)
	f := setupWith(t, func(c *pipeline.Config) { c.Executors.RegisterReviewer("gated", rv) })
	ctx := context.Background()
	raw := gatedDoc().Sealed(t)
	id := idOf(t, raw)
	f.publish(t, raw)
	<-rv.started
	first := reviewMsg(t, f)
	named, err := store.DecodeClaimed(first.Header.Get(store.HeaderClaim))
	require.NoError(t, err)

	bare := nats.NewMsg(first.Subject)
	for k, v := range first.Header {
		if k != store.HeaderClaim {
			bare.Header[k] = v
		}
	}
	_, err = f.js.PublishMsg(ctx, bare)
	require.NoError(t, err)
	// Once renewed (the heartbeat), the claim is no longer as written.
	f.bundle.WaitCheckpoint(t, id, func(cp *capsule.Checkpoint) bool {
		ex := cp.State.Execution
		return ex != nil && ex.Holder == named.Holder && ex.ExpiresAt.After(named.ExpiresAt)
	})
	_, err = f.js.PublishMsg(ctx, first)
	require.NoError(t, err)
	// Both copies are taken and refused (a claim held) at least once more.
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		return phaseConsumer(t, f, capsule.ReviewPhase).Delivered.Consumer >= 5
	}, "the copies were never delivered again")
	require.Equal(t, int64(1), rv.n.Load())

	close(rv.gate)
	requireSevenPhases(t, f.wait(t, id))
	require.Equal(t, int64(1), rv.n.Load(), "reviewed once")
	queued(t, f, capsule.ReviewPhase, 0)
	requireOutcomes(t, f, 1)
}

// TestReviewAdoptedByAnotherSagad: the sagad that ran EXECUTION stops
// (gracefully or not: its work is written) before REVIEW's message is
// taken; the next sagad's first delivery adopts the claim and reviews at
// once, writing no claim, without waiting for the claim's lease (30 s).
func TestReviewAdoptedByAnotherSagad(t *testing.T) {
	t.Parallel()
	rv := newGatedReviewer(false)
	const lease = 30 * time.Second
	f := setupWith(t, func(c *pipeline.Config) {
		c.Executors.RegisterReviewer("gated", rv)
		c.ClaimLease = lease
		c.NoPauseView = true // a pause this sagad has not seen: it takes REVIEW's claim
	})
	ctx := context.Background()
	a, id := queuedAtReview(t, f)
	cp := f.bundle.WaitCheckpoint(t, id, func(cp *capsule.Checkpoint) bool { return cp.State.Phase == capsule.ReviewPhase })
	require.NotNil(t, cp.State.Execution, "EXECUTION's result write took REVIEW's claim")
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	f.pipe.Stop(stopCtx)
	cancel()

	cfg := f.cfg
	cfg.NoPauseView = false
	cfg.InstanceID = "second-sagad"
	f.pipe = f.start(t, cfg)
	seen := watchWrites(t, f, id)
	resumed := time.Now()
	require.NoError(t, a.ResumePhase(ctx, capsule.ReviewPhase))
	requireSevenPhases(t, f.wait(t, id))
	require.Less(t, time.Since(resumed), lease/3, "reviewed without waiting for the lease")
	require.Equal(t, int64(1), rv.n.Load())
	requireOutcomes(t, f, 1)
	require.Len(t, seen(), 2, "REVIEW's result and HANDOFF's end: no claim write")
}

// TestReviewPausedAfterTheClaim: a person pauses the capsule after
// EXECUTION's write took REVIEW's claim and before REVIEW took the
// message. REVIEW holds its claim from that write, so the pause is one
// made while REVIEW runs: a delivery that has not read the pause (the
// sagad whose cache wrote the claim) reviews, and the capsule parks at
// HANDOFF, as a pause made during a review always did; a delivery that
// reads it (another sagad) drops the message, and lets the unused claim
// go so that the resume reviews at once rather than after the lease.
// Either way the capsule is reviewed once and completes once resumed.
func TestReviewPausedAfterTheClaim(t *testing.T) {
	t.Parallel()
	for _, another := range []bool{false, true} {
		name := map[bool]string{false: "the same sagad", true: "another sagad"}[another]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rv := newGatedReviewer(false)
			const lease = 30 * time.Second
			f := setupWith(t, func(c *pipeline.Config) {
				c.Executors.RegisterReviewer("gated", rv)
				c.ClaimLease = lease
				c.NoPauseView = true
			})
			ctx := context.Background()
			a, id := queuedAtReview(t, f)
			if another {
				stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
				f.pipe.Stop(stopCtx)
				cancel()
			}
			_, err := a.Pause(ctx, id, "look first", "alice")
			require.NoError(t, err)
			if another {
				cfg := f.cfg
				cfg.InstanceID = "second-sagad"
				f.pipe = f.start(t, cfg)
			}
			require.NoError(t, a.ResumePhase(ctx, capsule.ReviewPhase))
			queued(t, f, capsule.ReviewPhase, 0)
			var cp *capsule.Checkpoint
			if another {
				cp = f.bundle.WaitCheckpoint(t, id, func(cp *capsule.Checkpoint) bool {
					return cp.State.Execution != nil && !cp.State.Execution.ExpiresAt.After(time.Now())
				})
				require.Equal(t, capsule.ReviewPhase, cp.State.Phase)
				require.Zero(t, rv.n.Load(), "the pause held")
			} else {
				cp = f.bundle.WaitCheckpoint(t, id, func(cp *capsule.Checkpoint) bool { return cp.State.Phase == capsule.Handoff })
				require.Equal(t, int64(1), rv.n.Load(), "reviewed under the claim held")
			}
			require.Equal(t, capsule.Paused, cp.State.Status)
			require.Equal(t, capsule.TriggerOperatorManual, cp.State.Pause.Trigger)

			resumed := time.Now()
			_, err = a.Resume(ctx, id, admin.ResumeOptions{})
			require.NoError(t, err)
			requireSevenPhases(t, f.wait(t, id))
			require.Less(t, time.Since(resumed), lease/3, "reviewed without waiting for the lease")
			require.Equal(t, int64(1), rv.n.Load())
			requireOutcomes(t, f, 1)
		})
	}
}

// TestReviewNotClaimedIntoAPausedPhase: EXECUTION's write takes no claim
// for a REVIEW this sagad knows is paused; resumed, the capsule is reviewed
// once (claiming by compare-and-set, as before).
func TestReviewNotClaimedIntoAPausedPhase(t *testing.T) {
	t.Parallel()
	rv := newGatedReviewer(false)
	f := setupWith(t, func(c *pipeline.Config) { c.Executors.RegisterReviewer("gated", rv) })
	ctx := context.Background()
	a := f.admin(t)
	require.NoError(t, a.PausePhase(ctx, capsule.ReviewPhase))
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return pipeline.PhasePaused(f.pipe, capsule.ReviewPhase)
	}, "the pause was never seen")
	raw := gatedDoc().Sealed(t)
	id := idOf(t, raw)
	f.publish(t, raw)
	queued(t, f, capsule.ReviewPhase, 1)
	cp := f.bundle.WaitCheckpoint(t, id, func(cp *capsule.Checkpoint) bool { return cp.State.Phase == capsule.ReviewPhase })
	require.Nil(t, cp.State.Execution, "no claim taken into a paused REVIEW")
	require.Empty(t, reviewHeader(t, f), "and the message names none")
	require.NoError(t, a.ResumePhase(ctx, capsule.ReviewPhase))
	requireSevenPhases(t, f.wait(t, id))
	require.Equal(t, int64(1), rv.n.Load())
}

// queuedAtReview pauses REVIEW through an admin of its own (a pause the
// pipeline learns from the advisory) and publishes a capsule for the gated
// reviewer, which waits in REVIEW's queue: that admin and its id.
func queuedAtReview(t *testing.T, f *fixture) (*admin.Admin, string) {
	t.Helper()
	a := f.admin(t)
	require.NoError(t, a.PausePhase(context.Background(), capsule.ReviewPhase))
	raw := gatedDoc().Sealed(t)
	id := idOf(t, raw)
	f.publish(t, raw)
	queued(t, f, capsule.ReviewPhase, 1)
	return a, id
}

// reviewHeader is the Saga-Claim header of the REVIEW message waiting.
func reviewHeader(t *testing.T, f *fixture) string {
	t.Helper()
	ctx := context.Background()
	s, err := f.js.Stream(ctx, store.PhaseStream(capsule.ReviewPhase))
	require.NoError(t, err)
	m, err := s.GetLastMsgForSubject(ctx, store.PhaseSubject(capsule.ReviewPhase))
	require.NoError(t, err)
	return m.Header.Get(store.HeaderClaim)
}

// TestReviewCopyPastTheWindowDoesNotAdopt: a copy of the REVIEW message
// stored after the claim's window (a copy made past the stream's duplicate
// window, the original gone) does not adopt the claim it names: it claims
// under a holder of its own, once the named claim lapsed, and reviews once.
func TestReviewCopyPastTheWindowDoesNotAdopt(t *testing.T) {
	t.Parallel()
	rv := newGatedReviewer(false)
	f := setupWith(t, func(c *pipeline.Config) {
		c.Executors.RegisterReviewer("gated", rv)
		c.NoPauseView = true
	})
	ctx := context.Background()
	a, id := queuedAtReview(t, f)
	first := reviewMsg(t, f)
	named, err := store.DecodeClaimed(first.Header.Get(store.HeaderClaim))
	require.NoError(t, err)
	// The window: the lease after the claim's write, and the clocks' skew.
	past := named.ExpiresAt.Add(3 * time.Second)
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool { return time.Now().After(past) }, "time stood still")
	s, err := f.js.Stream(ctx, store.PhaseStream(capsule.ReviewPhase))
	require.NoError(t, err)
	orig, err := s.GetLastMsgForSubject(ctx, store.PhaseSubject(capsule.ReviewPhase))
	require.NoError(t, err)
	_, err = f.js.PublishMsg(ctx, first)
	require.NoError(t, err)
	require.NoError(t, s.DeleteMsg(ctx, orig.Sequence))

	seen := watchWrites(t, f, id)
	require.NoError(t, a.ResumePhase(ctx, capsule.ReviewPhase))
	requireSevenPhases(t, f.wait(t, id))
	require.Equal(t, int64(1), rv.n.Load())
	writes := seen()
	require.Len(t, writes, 3, "REVIEW's own claim, its result and HANDOFF's end")
	claim := writes[0]
	cp, err := store.DecodeCheckpoint(id, 0, claim.Data)
	require.NoError(t, err)
	require.Equal(t, capsule.ReviewPhase, cp.State.Phase)
	require.NotNil(t, cp.State.Execution)
	require.NotEqual(t, named.Holder, cp.State.Execution.Holder, "the copy claimed as itself, not as the holder it names")
}

// TestReviewAdoptedUnderClockSkew: the sagad that wrote REVIEW's claim has
// a clock ahead of the server's by more than a couple of seconds (well
// under the lease, which is what the leases tolerate). The REVIEW
// message, stored by the server's clock "before" the claim's write by the
// writer's, still names a claim no other message can name (its holder is
// fresh), so its first delivery adopts it: no claim write, no wait for the
// lease.
func TestReviewAdoptedUnderClockSkew(t *testing.T) {
	t.Parallel()
	rv := newGatedReviewer(false)
	const lease, skew = 30 * time.Second, 6 * time.Second
	f := setupWith(t, func(c *pipeline.Config) {
		c.Executors.RegisterReviewer("gated", rv)
		c.ClaimLease = lease
		c.Now = func() time.Time { return time.Now().Add(skew) }
		c.NoPauseView = true // a pause this sagad has not seen: it takes REVIEW's claim
	})
	ctx := context.Background()
	a, id := queuedAtReview(t, f)
	cp := f.bundle.WaitCheckpoint(t, id, func(cp *capsule.Checkpoint) bool { return cp.State.Phase == capsule.ReviewPhase })
	require.NotNil(t, cp.State.Execution, "EXECUTION's result write took REVIEW's claim")

	seen := watchWrites(t, f, id)
	resumed := time.Now()
	require.NoError(t, a.ResumePhase(ctx, capsule.ReviewPhase))
	requireSevenPhases(t, f.wait(t, id))
	require.Less(t, time.Since(resumed), lease/3, "reviewed without waiting for the lease")
	require.Equal(t, int64(1), rv.n.Load())
	require.Len(t, seen(), 2, "REVIEW's result and HANDOFF's end: no claim write")
}
