package pipeline

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/phases"
	"github.com/sagad/sagad/store"
)

// REVIEW's claim taken by EXECUTION's result write (issue 36). REVIEW
// claimed its cycle with a compare-and-set of its own before calling the
// reviewer: one sequential write per cycle. EXECUTION's result write,
// made just before by the delivery that then sends the REVIEW message,
// takes that claim instead (machine.Decide.Then), for a holder the message
// names (store.HeaderClaim); that message's first delivery adopts it and
// calls the reviewer without writing. What holds:
//
//   - Nothing is reviewed twice. The claim's holder is a fresh token per
//     write, and only the writer sends a message naming it, with one
//     publish (retried only when no stream answered, when nothing was
//     stored): at most one stored message names it, and only its first
//     delivery (NumDelivered 1) adopts. Every other delivery — a
//     redelivery, a re-emit by a stale EXECUTION message, the rescuer's,
//     a resume's — claims by compare-and-set as before, so it respects a
//     live claim of the adopter and takes a lapsed one over.
//   - A copy of that message made after the fact (only sagad's own
//     account publishes on saga.phase.*) adopts only while the claim is
//     as written and the copy was stored within the lease after the
//     write: never once the adopter renewed the claim (its first
//     heartbeat), never past the stream's duplicate window. A copy made by
//     hand within the adopter's first heartbeat could call the reviewer a
//     second time (its result still recorded once); sagad makes none.
//   - Nothing waits longer than before. The adopter calls at once on any
//     sagad; a claim older than a third of its lease (the message waited
//     in a queue) is renewed with a write first, as its holder. An
//     adopter that ends without calling (a retry before its call, the
//     capsule paused meanwhile) lets the claim lapse at once with a write,
//     so the next delivery need not wait for the lease.
//   - A person's pause holds: no claim is taken into a REVIEW this process
//     knows is paused (pauseView) or for a capsule paused, parked or
//     ended; a pause made afterwards finds a claim held, as it would have
//     had REVIEW started at once.
//   - NoDefer keeps the claim write of its own (the routine this replaces).

// claimSkew is the clock skew an adopted claim tolerates between the sagad
// that wrote it and the server that stored the message naming it, when
// the writer's clock is behind (the message looks stored late). A writer's
// clock ahead of the server's makes the message look stored before the
// write: that is tolerated up to a lease (what every lease tolerates),
// since no message stored before the write can name its fresh holder; a 2
// s bound there made every review wait out the lease under a few seconds
// of skew.
const claimSkew = 2 * time.Second

// preclaim makes this EXECUTION attempt's result write take REVIEW's claim
// of the cycle (txn.then) when decision d advances into a REVIEW not known
// paused; the machine takes it only if the capsule goes on in progress
// there.
func (r *run) preclaim(d phases.Decision) {
	if r.ph != capsule.Execution || r.p.cfg.NoDefer || d.Action != phases.Advance || d.Trigger != "" || d.Wait ||
		r.p.pauses.isPaused(capsule.ReviewPhase) {
		return
	}
	r.t.then = r.p.runToken()
}

// preclaimed is the claim the write of cp took for the next phase's
// message, nil if it took none.
func (t *txn) preclaimed(cp *capsule.Checkpoint) *capsule.ExecutionClaim {
	if ex := cp.State.Execution; t.then != "" && ex != nil && ex.Holder == t.then {
		return ex
	}
	return nil
}

// adoptable reports whether this delivery of a REVIEW message may hold
// the claim c it names: the message's first delivery, the capsule in
// progress at REVIEW of its cycle, the claim as its writer took it.
func (r *run) adoptable(c *store.Claimed, md *jetstream.MsgMetadata, mdErr error) bool {
	cp := r.t.view()
	return machine.Current(cp, r.ph, r.cycle) && r.asWritten(c, cp, md, mdErr)
}

// asWritten reports whether c, the claim this delivery's message names, is
// the claim cp holds as its writer took it (not renewed or taken over
// since), and this delivery the first of the message the writer sent: one
// stored within the lease after the claim's write (a copy stored past the
// stream's duplicate window is not).
func (r *run) asWritten(c *store.Claimed, cp *capsule.Checkpoint, md *jetstream.MsgMetadata, mdErr error) bool {
	if c == nil || mdErr != nil || md.NumDelivered != 1 || r.ph != capsule.ReviewPhase || r.p.cfg.NoDefer {
		return false
	}
	ex := cp.State.Execution
	if ex == nil || ex.Cycle != r.cycle || ex.Holder != c.Holder || !ex.ExpiresAt.Equal(c.ExpiresAt) {
		return false
	}
	written := ex.ExpiresAt.Add(-r.p.cfg.ClaimLease)
	return !md.Timestamp.Before(written.Add(-r.p.cfg.ClaimLease)) && !md.Timestamp.After(written.Add(r.p.cfg.ClaimLease+claimSkew))
}

// adopt makes this delivery the holder of the claim its message names
// (adoptable): its claim (run.Claim) then writes nothing while the claim
// is young, and everything it records is recorded as that holder.
func (r *run) adopt(c *store.Claimed) {
	r.t.token = c.Holder
	r.adopted = c
}

// claimAdopted takes the adopted claim as this delivery's without a
// write while it is younger than a third of its lease (a Heartbeat by
// default): the heartbeat's first renewal, at most a Heartbeat after the
// attempt started, then comes with at least a third of the lease left,
// where a claim written at the start had two. false: the caller claims
// by compare-and-set (as the adopted claim's holder, if it adopted one:
// the claim is then renewed before the call).
func (r *run) claimAdopted() bool {
	c := r.adopted
	if c == nil {
		return false
	}
	r.adopted = nil
	written := c.ExpiresAt.Add(-r.p.cfg.ClaimLease)
	if r.p.cfg.Now().Sub(written) >= r.p.cfg.ClaimLease/3 {
		return false
	}
	r.t.claimedNano.Store(written.UnixNano())
	r.t.claimed.Store(true)
	return true
}

// releaseAdopted lets the claim this delivery adopted and never used lapse
// now (the attempt ends without calling the reviewer): the next delivery
// then claims at once instead of waiting for the lease. A failure leaves
// the claim to lapse by itself.
func (r *run) releaseAdopted(ctx context.Context) {
	c := r.adopted
	if c == nil || r.t.claimed.Load() {
		return
	}
	r.adopted = nil
	r.t.releaseClaim(ctx, r.cycle, c.Holder)
}

// releaseClaim ends holder's claim on cycle now, if the checkpoint still
// holds it (a lapsed claim is taken over by the next claim).
func (t *txn) releaseClaim(ctx context.Context, cycle int, holder string) {
	if _, err := t.apply(ctx, machine.Renew{Cycle: cycle, Holder: holder, ExpiresAt: t.p.cfg.Now()}, reapply); err != nil {
		t.p.log.Debug("release an adopted claim", "key", t.key, "cycle", cycle, "error", err)
	}
}

// releaseParked lets the claim the message names lapse when its first
// delivery finds the capsule paused at REVIEW before the claim was used
// (a person paused it after EXECUTION's write): the resume's message then
// claims at once.
func (r *run) releaseParked(ctx context.Context, c *store.Claimed) {
	if c == nil {
		return
	}
	md, err := r.msg.Metadata()
	cp := r.t.view()
	st := cp.State
	if st.Status != capsule.Paused || st.Phase != r.ph || st.Cycle != r.cycle || !r.asWritten(c, cp, md, err) ||
		!r.p.cfg.Now().Before(c.ExpiresAt) {
		return
	}
	r.t.releaseClaim(ctx, r.cycle, c.Holder)
}
