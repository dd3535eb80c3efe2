package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/cas"
	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/internal/logline"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/phases"
	"github.com/sagad/sagad/runner"
	"github.com/sagad/sagad/store"
)

// forgottenAfter is how many deliveries find no checkpoint before a phase
// message is taken for one of a forgotten capsule (see advance).
const forgottenAfter = 10

// handle runs phase ph for one message: every outcome ends in an ack
// (transition recorded, or already recorded), a nak with delay (try again
// later) or a termination (the message can never succeed).
//
// It makes no context of its own: every read and write carries its own
// deadline, and only a phase that waits on something else is bounded by
// PhaseTimeout (see runContext).
func (p *Pipeline) handle(ctx context.Context, ph capsule.Phase, msg jetstream.Msg) runner.Delivery {
	if ph == capsule.Reception {
		return p.receive(ctx, msg)
	}
	return p.advance(ctx, ph, msg)
}

// advance runs phases 1–6.
func (p *Pipeline) advance(ctx context.Context, ph capsule.Phase, msg jetstream.Msg) runner.Delivery {
	// A phase message is only a pointer to the checkpoint: its headers name
	// the capsule and the cycle, and whatever else it says is checked
	// against the checkpoint. Headers that cannot name one never will.
	pm, cause, err := store.DecodePhaseMsg(msg.Headers())
	if err != nil {
		return runner.Term(cause, err)
	}
	key, cycle := pm.Key, pm.Cycle
	// The body is not trusted either: the phase acts on the bytes RECEPTION
	// accepted and kept, and the outcome carries them.
	raw, c, same, err := p.st.Accepted(ctx, key, msg.Data())
	if errors.Is(err, corrupt.ErrCorrupt) {
		return p.corrupted(ctx, key, nil, nil, err)
	}
	if errors.Is(err, store.ErrNotACapsule) {
		return runner.Term(metrics.TermUndecodable, err)
	}
	if err != nil {
		return p.unknown(ctx, key, msg, runner.Retry(err))
	}
	if !same {
		p.log.Warn("phase message body is not the capsule RECEPTION accepted: ignored, the kept bytes are used",
			"phase", ph.String(), "key", key, "cycle", cycle, "subject", msg.Subject())
	}
	// Phases start from this process's cached checkpoint when it has one: a
	// stale one loses its first compare-and-set (a claim, before any agent
	// is called, or the commit), and the phase then runs again on the
	// checkpoint read from KV. EXECUTION too, though it takes its locks
	// before its claim: a capsule cancelled (or moved on) meanwhile finds
	// its EXECUTION transition recorded on the second run, and re-emitting
	// that transition releases the locks (machine.EffectsOf), as it does
	// for a stale message; an operator's pause releases them the same way.
	// The cache saves EXECUTION a read, a sequential round trip, per cycle.
	d, stale := p.attempt(ctx, ph, msg, pm, raw, c, true, false)
	if stale {
		// The cached checkpoint was behind: decide again on the real one.
		d, _ = p.attempt(ctx, ph, msg, pm, raw, c, false, false)
	}
	if errors.Is(d.Err, corrupt.ErrCorrupt) {
		return p.corrupted(ctx, key, raw, c, d.Err)
	}
	return p.unknown(ctx, key, msg, d)
}

// unknown turns d, the delivery of a message about a capsule sagad found no
// checkpoint or kept bytes of, into a termination when the stream's leader
// confirms there is none: the capsule ended and was forgotten (retention),
// or never existed. A replica that is behind may have answered the first
// read; the leader cannot be behind, and every phase message is published
// after its checkpoint and bytes were written. A leader that cannot be asked
// leaves the message to be tried again, up to a grace of deliveries.
func (p *Pipeline) unknown(ctx context.Context, key string, msg jetstream.Msg, d runner.Delivery) runner.Delivery {
	if !errors.Is(d.Err, store.ErrNotFound) {
		return d
	}
	_, _, err := p.st.Checkpoints.GetLatest(ctx, key, nil)
	if errors.Is(err, store.ErrNotFound) {
		return runner.Term(metrics.TermUnknownCapsule, d.Err)
	}
	if md, merr := msg.Metadata(); err != nil && merr == nil && md.NumDelivered >= forgottenAfter {
		return runner.Term(metrics.TermUnknownCapsule, fmt.Errorf("nothing known after %d deliveries: %w", md.NumDelivered, d.Err))
	}
	return d
}

// attempt runs phase ph once for the message. With useCache it may start
// from a stale checkpoint; it then reports stale instead of acting on it.
// eager makes it decide every deferred phase before its own (deferred.go).
func (p *Pipeline) attempt(ctx context.Context, ph capsule.Phase, msg jetstream.Msg, pm store.PhaseMsg, raw []byte, c *capsule.Capsule, useCache, eager bool) (runner.Delivery, bool) {
	r := &run{p: p, ph: ph, cycle: pm.Cycle, msg: msg, raw: raw, c: c, deferred: pm.Deferred, eager: eager, named: pm.Claimed}
	r.t = &r.txn
	r.t.p, r.t.key, r.t.run = p, pm.Key, r
	if callsAgents(ph) {
		// Its claim, its calls' records and its agents' questions name the
		// attempt from the start, on other goroutines too (heartbeat,
		// observer). Other phases make theirs when they record (holder).
		r.t.token = p.runToken()
	}
	if d, stale, ok := r.position(ctx, pm.ResumeToken, useCache); !ok {
		return d, stale
	}
	if d, stale, ok := r.runBytes(ctx); !ok {
		return d, stale
	}
	md, mdErr := msg.Metadata()
	if mdErr == nil && md.NumDelivered > 1 {
		p.metrics.Redelivered(ph)
	}
	if r.adoptable(r.named, md, mdErr) {
		r.adopt(r.named)
	}
	// The heartbeat keeps the message and the claim alive for as long as
	// the phase runs and its result is recorded; losing the claim stops the run.
	runCtx, stopRun := p.runContext(ctx, ph)
	defer stopRun()
	hb := p.heartbeat(runCtx, &r.hb, msg, r.t, r.cycle, stopRun)
	defer hb.stop()
	if callsAgents(ph) {
		// A streamed call shows its progress, and its agent's questions
		// park the capsule while it runs.
		r.obsv = callObserver{p: p, t: r.t, ph: r.ph, cycle: r.cycle}
		r.obs = &r.obsv
		runCtx = executors.WithObserver(runCtx, r.obs)
	}
	start := p.cfg.Now()
	if next, ok := r.forwardable(start); ok {
		p.traceForward(runCtx, ph, r.cycle, r.t.view())
		return r.deferAdvance(ctx, next, phases.AdvanceWith(), start), false
	}
	d := p.corruptDecision(r.decide(runCtx, start, md, mdErr))
	if r.obs != nil {
		r.obs.finish()
	}
	if r.t.cacheMiss.Load() {
		// The claim found the cached checkpoint stale before any agent
		// was called: decide again on the real one.
		return runner.Ack(), true
	}
	if d.Action == phases.Retry {
		r.releaseAdopted(ctx)
		return runner.NakAfter(d.Delay, d.Err), false
	}
	if next, ok := r.deferrable(d, start); ok {
		return r.deferAdvance(ctx, next, d, start), false
	}
	if r.t.isAssumed() {
		// This phase writes, and REALITY_ANCHOR's deferred decision was
		// assumed, not made: decide it first, then this phase again.
		stopRun()
		hb.stop()
		return p.attempt(ctx, ph, msg, pm, raw, c, useCache, true)
	}
	// Record what happened even if sagad is stopping (or ctx's time is
	// about to run out): a fresh bound then, not a timer per message.
	if dl, ok := ctx.Deadline(); (ok && time.Until(dl) < recordTimeout) || ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
		defer cancel()
	}
	r.preclaim(d)
	res, err := r.record(ctx, runCtx, d)
	hb.stop() // the claim ends with the transition
	if err != nil {
		return r.unrecorded(ctx, err)
	}
	p.observe(res.Checkpoint, res.Transition, d, p.cfg.Now().Sub(start))
	if err := p.st.EmitClaimed(ctx, res.Checkpoint, r.t.revision(), res.Transition, r.raw, r.c.Constraints.ResourceLocksRequired, r.t.preclaimed(res.Checkpoint)); err != nil {
		// The transition is recorded; redelivery re-emits its effects.
		return runner.Retry(err), false
	}
	return runner.Ack(), false
}

// runToken names one attempt in the claims it takes: the instance, "/", and
// an id shaped like a nuid, unique across attempts and processes as a nuid
// is. It was InstanceID + "/" + nuid.Next(): nuid's one global lock, taken
// by every phase worker at every attempt.
func (p *Pipeline) runToken() string {
	var b [96]byte
	buf := append(b[:0], p.cfg.InstanceID...)
	buf = append(buf, '/')
	return string(p.tokens.AppendNext(buf))
}

// runContext is the context phase ph runs under. EXECUTION and REVIEW
// wait on more than their own reads and writes — an agent, a lock another
// capsule holds, a pause between attempts — and are bounded by
// PhaseTimeout; they alone claim their cycle, and a lost claim cancels
// their context (heartbeat). The other phases only read and write, each
// under its own deadline, and hold no claim to lose: they run on ctx
// itself, with no context or timer of their own (one per message was about
// 1.6 % of sagad's CPU).
func (p *Pipeline) runContext(ctx context.Context, ph capsule.Phase) (context.Context, context.CancelFunc) {
	if callsAgents(ph) {
		return context.WithTimeout(ctx, p.cfg.PhaseTimeout)
	}
	return ctx, func() {}
}

// callsAgents reports whether phase ph calls agents: EXECUTION (its
// executor) and REVIEW (its reviewers). The other phases read and write
// only, and decide from the kept bytes, the checkpoint and the clock.
func callsAgents(ph capsule.Phase) bool { return ph == capsule.Execution || ph == capsule.ReviewPhase }

// run is one attempt at a phase for one message: what it acts on, and the
// checkpoint it works through.
type run struct {
	p     *Pipeline
	ph    capsule.Phase
	cycle int
	msg   jetstream.Msg
	raw   []byte
	c     *capsule.Capsule
	t     *txn
	// cached says the run started from the process's cached checkpoint.
	cached bool
	// deferred are the phases before this one the message says were
	// decided and not written (see deferred.go).
	deferred []store.Deferred
	// eager makes catchUp decide REALITY_ANCHOR rather than assume it.
	eager bool
	// named is the claim the message names for its first delivery
	// (store.HeaderClaim); adopted is that claim while this delivery
	// holds it unused (adopt.go).
	named, adopted *store.Claimed

	// obs observes the attempt's agent calls (EXECUTION and REVIEW): obsv,
	// held in the run like txn.
	obs  *callObserver
	obsv callObserver

	// txn, hb and in are t, the heartbeat and the phase's input, held in
	// the run: one allocation an attempt where there were four.
	txn txn
	hb  beat
	in  phases.Input
}

// position loads the checkpoint and makes sure it waits for this (phase,
// cycle), finishing the resume that sent the message if it has not yet. ok
// false ends the attempt with d (stale: decide again on the real checkpoint).
func (r *run) position(ctx context.Context, token string, useCache bool) (d runner.Delivery, stale, ok bool) {
	t := r.t
	if useCache {
		var err error
		if r.cached, err = t.loadCached(ctx); err != nil {
			return runner.Retry(err), false, false
		}
		t.fromCache = r.cached
		if err := t.catchUp(ctx); err != nil {
			return runner.Retry(err), false, false
		}
		if r.cached && !t.current(r.ph, r.cycle) {
			return runner.Ack(), true, false
		}
	} else if err := t.load(ctx); err != nil {
		return runner.Retry(err), false, false
	} else if err := t.catchUp(ctx); err != nil {
		return runner.Retry(err), false, false
	}
	if !t.current(r.ph, r.cycle) && !t.resumable(r.ph, r.cycle, token) {
		// Before taking the message for a stale one, make sure the
		// checkpoint is not: a replica may answer with what it has so far,
		// and this message may be the effect of a newer write.
		if err := t.loadLatest(ctx); err != nil {
			return runner.Retry(err), false, false
		}
		if err := t.catchUp(ctx); err != nil {
			return runner.Retry(err), false, false
		}
	}
	if t.current(r.ph, r.cycle) {
		return runner.Delivery{}, false, true
	}
	if d, ok := r.writeCaughtUp(ctx); ok {
		return d, false, false
	}
	if !t.resumable(r.ph, r.cycle, token) {
		r.releaseParked(ctx, r.named)
		return r.reemit(ctx, t.view()), false, false
	}
	// The resume that sent this message may not have flipped the state yet
	// (or died before it could): finish it here.
	if err := t.resume(ctx, r.ph, r.cycle, token); errors.Is(err, errStale) {
		return r.reemit(ctx, t.cp), false, false
	} else if err != nil {
		return runner.Retry(err), false, false
	}
	return runner.Delivery{}, false, true
}

// reemit re-emits the effects of the transition cp recorded for this (phase,
// cycle), if any, and acks.
func (r *run) reemit(ctx context.Context, cp *capsule.Checkpoint) runner.Delivery {
	return r.p.reemitFor(ctx, cp, r.ph, r.cycle, r.raw, r.c.Constraints.ResourceLocksRequired)
}

// runBytes makes r.raw and r.c the bytes this run of the capsule acts on.
// ok false ends the attempt with d.
func (r *run) runBytes(ctx context.Context) (d runner.Delivery, stale, ok bool) {
	p, t := r.p, r.t
	cp := t.view()
	if cp.Run > 1 && r.c.Integrity.SHA256 != cp.Digest {
		// A replayed run acts on the bytes its checkpoint names (a
		// corrected capsule's), which a replay that died half-way may not
		// have kept yet: RunBytes finishes that.
		raw, c, err := p.st.RunBytes(ctx, cp)
		if err != nil {
			return runner.Retry(err), false, false
		}
		r.raw, r.c = raw, c
		return runner.Delivery{}, false, true
	}
	if cp.Run > 1 || (cp.Digest != "" && r.c.Integrity.SHA256 == cp.Digest) {
		return runner.Delivery{}, false, true
	}
	// The capsule came from the cache by key, and a key can be forgotten
	// (retention) and accepted again with other bytes: the checkpoint's
	// digest says which capsule this run is (RECEPTION let none through
	// whose declared digest was not its own). A checkpoint of an earlier
	// version has no digest: read the bytes.
	raw, c, err := p.st.Kept(ctx, t.key)
	if err != nil {
		return runner.Retry(err), false, false
	}
	if cp.Digest != "" && c.Integrity.SHA256 != cp.Digest {
		if t.fromCache {
			// The cached checkpoint is the forgotten capsule's.
			return runner.Ack(), true, false
		}
		// A replica behind may still hold the forgotten capsule's; after
		// forgottenAfter deliveries, none is that far behind: the bytes are
		// not the ones sagad kept.
		err := fmt.Errorf("the bytes kept for %s are not the capsule its checkpoint names (digest %s)", t.key, cp.Digest)
		if md, merr := r.msg.Metadata(); merr == nil && md.NumDelivered >= forgottenAfter {
			return runner.Retry(corrupt.New(corrupt.Capsules, t.key, 0, err)), false, false
		}
		return runner.Retry(fmt.Errorf("%w: try again", err)), false, false
	}
	r.raw, r.c = raw, c
	return runner.Delivery{}, false, true
}

// decide runs the phase (or parks the capsule whose deadline is near) on the
// checkpoint as it is: checkpoints are never changed in place (every change
// is made on a clone), so no copy is needed.
func (r *run) decide(ctx context.Context, start time.Time, md *jetstream.MsgMetadata, mdErr error) phases.Decision {
	p, c := r.p, r.c
	view := r.t.view()
	if w, ok := p.deadlineWarning(view, c, start); ok {
		return w
	}
	r.in = phases.Input{Capsule: c, Raw: r.raw, Checkpoint: view, Holder: r}
	in := &r.in
	if mdErr == nil {
		in.Entered = md.Timestamp
		in.Redelivered = md.NumDelivered > 1
	}
	return p.runTraced(ctx, r.ph, r.cycle, view, in)
}

// Revalidate confirms the attempt still holds its claim before a phase
// writes what a long agent call produced (phases.Holder).
func (r *run) Revalidate(ctx context.Context) error {
	t := r.t
	// A claim younger than half its lease cannot have lapsed.
	if !t.claimed.Load() || r.p.cfg.Now().Sub(t.claimedAt()) < r.p.cfg.ClaimLease/2 {
		return nil
	}
	return t.renew(ctx, r.cycle)
}

// OperatorAnswer is the latest answer a person gave the capsule as this
// attempt last read or wrote its checkpoint (phases.AnswerHolder): an
// answer to its agent's question reaches the next attempt's call.
func (r *run) OperatorAnswer() *capsule.OperatorAnswer {
	return r.t.view().State.OperatorAnswer
}

// RecordAttempt records a failed executor call with the attempt's claim as
// its holder (phases.Holder).
func (r *run) RecordAttempt(ctx context.Context, ev machine.RecordAttempt) error {
	if r.obs != nil {
		// The failed call's questions are recorded before its end is, which
		// closes them.
		r.obs.asking.Wait()
	}
	ev.Holder = r.t.token
	_, err := r.t.apply(ctx, ev, reapply)
	return err
}

// Claim takes the cycle's execution claim with a new call token: the
// executor calls made under it carry it, and a child capsule they publish
// presents it (phases.Holder).
func (r *run) Claim(ctx context.Context) error {
	if r.claimAdopted() {
		return nil
	}
	tok, err := executors.NewCompletionToken()
	if err != nil {
		return err
	}
	if err := r.t.claim(ctx, r.ph, r.cycle, r.c.Constraints.ResourceLocksRequired, executors.CompletionTokenHash(tok)); err != nil {
		return err
	}
	r.in.CallToken = tok
	return nil
}

// record commits decision d as the transition of this (phase, cycle). A
// checkpoint sagad did not write in its place will not change by trying
// again (the capsule halts, see corrupted); any other failure is tried again
// while the claim holds: an agent's result waits to be recorded (the server
// restarts, the disk is full), the heartbeat keeps the claim and the
// message, and recording is tried again until it lands, the claim is lost to
// another delivery, or sagad stops. Throwing the result away would call the
// agent again.
func (r *run) record(ctx, runCtx context.Context, d phases.Decision) (machine.Result, error) {
	p, t := r.p, r.t
	// A successful claim proved the cached checkpoint current at that point.
	unverified := r.cached && !t.claimed.Load()
	res, err := t.commit(ctx, r.ph, r.cycle, d, unverified)
	for err != nil && !errors.Is(err, errStale) && !errors.Is(err, corrupt.ErrCorrupt) && t.claimed.Load() && runCtx.Err() == nil {
		p.log.Warn("an agent's result is not recorded yet: keeping the claim and trying again",
			"capsule_id", r.c.CapsuleID, "phase", r.ph.String(), "cycle", r.cycle, "error", err)
		select {
		case <-p.stopping:
		case <-runCtx.Done():
		case <-time.After(p.cfg.RetryDelay):
		}
		if isDone(p.stopping) {
			break
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
		res, err = t.commit(wctx, r.ph, r.cycle, d, unverified)
		cancel()
	}
	return res, err
}

// unrecorded is the delivery of a decision record could not commit.
func (r *run) unrecorded(ctx context.Context, err error) (runner.Delivery, bool) {
	if !errors.Is(err, errStale) {
		return runner.Retry(err), false
	}
	if r.cached && !r.t.claimed.Load() {
		return runner.Ack(), true
	}
	// Someone else recorded this transition (or the capsule moved on):
	// their outcome stands, ours is dropped.
	return r.reemit(ctx, r.t.view()), false
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// recordTimeout bounds recording a phase's result and emitting its effects.
const recordTimeout = 30 * time.Second

// deadlineWarning parks a capsule whose deadline (in force) is closer than
// the configured warning, once.
func (p *Pipeline) deadlineWarning(cp *capsule.Checkpoint, c *capsule.Capsule, now time.Time) (phases.Decision, bool) {
	if p.cfg.DeadlineWarning <= 0 || cp.State.HasWarned(capsule.TriggerDeadlineApproaching) {
		return phases.Decision{}, false
	}
	left := cp.State.DeadlineIn(c.Deadline).Sub(now)
	if left >= p.cfg.DeadlineWarning {
		return phases.Decision{}, false
	}
	return phases.ParkWith(capsule.TriggerDeadlineApproaching, fmt.Sprintf("%s left before the deadline", left.Round(time.Second))), true
}

// errStale: the checkpoint no longer waits for this (phase, cycle).
var errStale = machine.ErrStale

// errCacheStale: a claim found the cached checkpoint the phase started from
// out of date.
var errCacheStale = errors.New("cached checkpoint out of date")

// errClaimLost: this delivery's claim on the cycle is gone (the capsule was
// cancelled, or another delivery took the cycle over).
var errClaimLost = machine.ErrClaimLost

// txn holds the checkpoint one message works on and its KV revision. Every
// change it makes is a machine event written with a compare-and-set; a
// heartbeat goroutine and the phase share it, hence the mutex.
type txn struct {
	p   *Pipeline
	key string
	// token names this delivery in claims and decisions (made at the
	// start for a phase that calls agents, else at first use: holder);
	// claimed says it holds a claim, taken (or last renewed) at
	// claimedNano.
	token       string
	claimed     atomic.Bool
	claimedNano atomic.Int64
	// fromCache says the run started from the process's cached checkpoint;
	// cacheMiss that its claim then found the cache stale.
	fromCache bool
	cacheMiss atomic.Bool

	// run is the attempt this txn belongs to: catchUp decides the
	// phases its message says were deferred.
	run *run

	mu  sync.Mutex
	cp  *capsule.Checkpoint
	rev uint64
	// merged are the deferred transitions cp holds that are not written
	// yet (catchUp): the next write records them.
	merged []capsule.Transition
	// assumed says merged holds REALITY_ANCHOR's advance unevaluated
	// (catchUp): nothing may be written from cp.
	assumed bool
	// known are the memoizable phases whose plain advance catchUp
	// decided on rev (caught.known): a deferral notes them again.
	known uint8
	// then is the holder of the next phase's claim this attempt's result
	// write takes (preclaim), "" for none.
	then string
}

// load reads the checkpoint from KV (decoding it only when the process's
// cached one is not that revision).
func (t *txn) load(ctx context.Context) error {
	cp, rev, err := t.p.st.Checkpoints.GetCached(ctx, t.key, t.p.st.Cache)
	if err != nil {
		return err
	}
	t.set(cp, rev)
	return nil
}

// loadLatest reads the checkpoint from the stream's leader: what a lost
// compare-and-set, or a message newer than a replica's answer, proves
// exists.
func (t *txn) loadLatest(ctx context.Context) error {
	cp, rev, err := t.p.st.Checkpoints.GetLatest(ctx, t.key, t.p.st.Cache)
	if err != nil {
		return err
	}
	t.set(cp, rev)
	return nil
}

// loadCached takes the checkpoint this process wrote last, if it has it.
func (t *txn) loadCached(ctx context.Context) (cached bool, err error) {
	if cp, rev, ok := t.p.st.Cache.Get(t.key); ok {
		t.mu.Lock()
		t.cp, t.rev = cp, rev
		t.mu.Unlock()
		return true, nil
	}
	return false, t.load(ctx)
}

// revision is the KV revision of the checkpoint last read or written.
func (t *txn) revision() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rev
}

// set records a checkpoint and revision just read or written.
func (t *txn) set(cp *capsule.Checkpoint, rev uint64) {
	t.mu.Lock()
	t.cp, t.rev, t.known = cp, rev, 0
	t.mu.Unlock()
	t.p.st.Cache.Put(cp, rev)
}

// current reports whether the checkpoint waits for phase ph of cycle: in
// progress there, or parked there while its call ran (an agent's
// question): a message redelivered after its sagad died takes the cycle
// on, and its claim ends the dead call's questions.
func (t *txn) current(ph capsule.Phase, cycle int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return machine.Running(t.cp, ph, cycle)
}

// view returns the checkpoint for a phase to read. It is shared: read only.
func (t *txn) view() *capsule.Checkpoint {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cp
}

// onConflict says what a lost compare-and-set means for one event.
type onConflict int

const (
	// reapply reads the checkpoint again and applies the event again: the
	// machine then refuses it if the checkpoint no longer allows it.
	reapply onConflict = iota
	// staleCache: the phase decided on the cached checkpoint, which the
	// conflict proves out of date; it must run again on the real one.
	staleCache
	// staleAfterLoad: read the checkpoint again (for re-emitting) and give
	// up on the event (a decision taken on a cached checkpoint that a pause
	// may predate).
	staleAfterLoad
)

// apply applies ev to the checkpoint this delivery holds through
// store.ApplyWith; policy says what a lost compare-and-set means.
func (t *txn) apply(ctx context.Context, ev machine.Event, policy onConflict) (machine.Result, error) {
	return t.p.st.ApplyWith(ctx, t.key, ev, t.p.cfg.Now(), store.ApplyHooks{
		Read: func(context.Context) (*capsule.Checkpoint, uint64, error) {
			t.mu.Lock()
			defer t.mu.Unlock()
			return t.cp, t.rev, nil
		},
		Conflict: func(ctx context.Context) error {
			switch policy {
			case staleCache:
				t.cacheMiss.Store(true)
				return errCacheStale
			case staleAfterLoad:
				if err := t.loadLatest(ctx); err != nil {
					return err
				}
				if err := t.catchUp(ctx); err != nil {
					return err
				}
				return errStale
			}
			// The conflict proves a newer write: read it where it surely is,
			// and decide again what the message says was deferred.
			if err := t.loadLatest(ctx); err != nil {
				return err
			}
			if err := t.catchUp(ctx); err != nil {
				return err
			}
			return cas.ErrConflict
		},
		Wrote: func(cp *capsule.Checkpoint, rev uint64) {
			t.set(cp, rev)
			t.landed(cp)
		},
	})
}

// claim takes the claim on (ph, cycle) for this delivery: the phase is about
// to call an agent, which must not happen twice for one cycle.
func (t *txn) claim(ctx context.Context, ph capsule.Phase, cycle int, lockPaths []string, callTokenHash string) error {
	policy := reapply
	if t.fromCache {
		// What the phase decided so far came from a possibly stale
		// checkpoint: on a conflict it must run again on the real one.
		policy = staleCache
	}
	_, err := t.apply(ctx, machine.Claim{
		Phase: ph, Cycle: cycle, Holder: t.token, ExpiresAt: t.p.cfg.Now().Add(t.p.cfg.ClaimLease), Locks: lockPaths,
		CallTokenHash: callTokenHash,
	}, policy)
	if err != nil {
		return err
	}
	t.claimedNano.Store(t.p.cfg.Now().UnixNano())
	t.claimed.Store(true)
	return nil
}

func (t *txn) claimedAt() time.Time { return time.Unix(0, t.claimedNano.Load()) }

// renew extends this delivery's execution claim, if it holds one.
func (t *txn) renew(ctx context.Context, cycle int) error {
	if !t.claimed.Load() {
		return nil
	}
	if _, err := t.apply(ctx, machine.Renew{Cycle: cycle, Holder: t.token, ExpiresAt: t.p.cfg.Now().Add(t.p.cfg.ClaimLease)}, reapply); err != nil {
		return err
	}
	t.claimedNano.Store(t.p.cfg.Now().UnixNano())
	return nil
}

// resumable reports whether a message carrying token may resume the capsule
// paused (or waiting) at (ph, cycle).
func (t *txn) resumable(ph capsule.Phase, cycle int, token string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return machine.Resumable(t.cp, ph, cycle, token)
}

// resume takes the capsule back to in_progress for the resume with token.
func (t *txn) resume(ctx context.Context, ph capsule.Phase, cycle int, token string) error {
	_, err := t.apply(ctx, machine.Resume{Token: token, At: &machine.Position{Phase: ph, Cycle: cycle}}, reapply)
	return err
}

// commit records decision d as the transition of (ph, cycle). If the
// checkpoint changed meanwhile but still stands at (ph, cycle) — in progress,
// or paused by an operator while the phase ran — the decision is applied to
// the fresh checkpoint; otherwise errStale.
//
// fromCache says the phase started from a cached checkpoint, not known to be
// current: then any conflict is stale, since a pause may predate the run.
func (t *txn) commit(ctx context.Context, ph capsule.Phase, cycle int, d phases.Decision, fromCache bool) (machine.Result, error) {
	policy := reapply
	if fromCache {
		policy = staleAfterLoad
	}
	ev := machine.Decide{Phase: ph, Cycle: cycle, Decision: d, Holder: t.holder(), Claimed: t.claimed.Load()}
	if t.then != "" {
		ev.Then = &machine.Claim{Phase: ph + 1, Cycle: cycle, Holder: t.then, ExpiresAt: t.p.cfg.Now().Add(t.p.cfg.ClaimLease)}
	}
	return t.apply(ctx, ev, policy)
}

// holder is the attempt's token, the holder its decision is recorded as.
// An attempt of a phase that calls no agent makes it here, at its first
// use, on its own goroutine (nothing else reads it): most such attempts
// defer their decision and record nothing, and a token is an allocation.
func (t *txn) holder() string {
	if t.token == "" {
		t.token = t.p.runToken()
	}
	return t.token
}

// reemitFor handles a message whose transition is already recorded: it
// re-emits that transition's effects (harmless when repeated) and acks.
func (p *Pipeline) reemitFor(ctx context.Context, cp *capsule.Checkpoint, ph capsule.Phase, cycle int, raw []byte, lockPaths []string) runner.Delivery {
	tr, ok := cp.Find(ph, cycle)
	if !ok {
		st := cp.State
		if st.Phase == ph && st.Cycle == cycle && st.Pause != nil && st.Pause.ResumeToken == "" &&
			(st.Status == capsule.Paused || st.Status == capsule.WaitingForOperator) {
			// Parked here, maybe by a delivery that died before writing the
			// continuation: write it (again) before dropping the message.
			if err := p.st.Emit(ctx, cp, 0, nil, raw, lockPaths); err != nil {
				return runner.Retry(err)
			}
		}
		if cp.Terminal() && ph == capsule.Execution && len(lockPaths) > 0 {
			// A run from a stale cached checkpoint may have taken the
			// capsule's locks before its claim failed; a capsule that ended
			// before reaching EXECUTION (cancelled while the message naming
			// its deferred advances waited) has no EXECUTION transition
			// whose re-emit would release them. An ended capsule holds none.
			if err := p.st.Locks.ReleaseAll(ctx, lockPaths, cp.Key); err != nil {
				return runner.Retry(err)
			}
		}
		// Not recorded and not current: the capsule is paused or waiting
		// here (resume sends a new message), or this message is a stray.
		// The checkpoint is the truth; drop it.
		p.log.Debug("stale message dropped", "key", cp.Key, "phase", ph.String(), "cycle", cycle, "state", cp.State.Status)
		return runner.Ack()
	}
	if err := p.st.Emit(ctx, cp, 0, &tr, raw, lockPaths); err != nil {
		return runner.Retry(err)
	}
	return runner.Ack()
}

// observe logs and counts one recorded change.
func (p *Pipeline) observe(cp *capsule.Checkpoint, tr *capsule.Transition, d phases.Decision, took time.Duration) {
	if tr == nil {
		p.log.Info("parked", "capsule_id", cp.CapsuleID, "key", cp.Key, "phase", cp.State.PhaseName, "cycle", cp.State.Cycle,
			"trace_id", cp.TraceID, "trigger", d.Trigger, "reason", d.Reason)
		p.metrics.Paused(d.Trigger)
		return
	}
	p.logTransition(cp, *tr, took)
	p.metrics.TransitionTraced(tr.Phase, tr.Outcome, took, traceIDOf(cp))
	if cp.State.Status.Terminal() {
		p.metrics.Ended(cp.State.Status, capsule.ParseHaltReason(cp.State.HaltReason))
		p.traceEnd(cp)
	}
	if d.Halt.Code == capsule.CodeAbsoluteRulesViolated {
		var rules []int
		for _, f := range d.Findings {
			if f.Rule != 0 {
				rules = append(rules, f.Rule)
			}
		}
		p.metrics.RuleViolations(rules)
	}
	if (cp.State.Status == capsule.Paused || cp.State.Status == capsule.WaitingForOperator) && cp.State.Pause != nil {
		p.metrics.Paused(cp.State.Pause.Trigger) // operator_gate for a capsule waiting_for_operator
	}
}

// transitionPC is the program counter logTransition's records name as
// their source, taken once: Logger.LogAttrs walks the stack for it at
// every line, whether the handler prints a source or not.
var transitionPC atomic.Uintptr

func (p *Pipeline) logTransition(cp *capsule.Checkpoint, tr capsule.Transition, took time.Duration) {
	ctx := context.Background()
	h := p.log.Handler()
	if !h.Enabled(ctx, slog.LevelInfo) {
		return
	}
	// Typed attributes: one line per transition is on the hot path.
	attrs := [8]slog.Attr{
		slog.String("capsule_id", cp.CapsuleID), slog.String("key", cp.Key), slog.String("phase", tr.PhaseName),
		slog.Int("cycle", tr.Cycle), slog.String("trace_id", cp.TraceID), slog.String("outcome", tr.Outcome),
		slog.Duration("duration", took)}
	n := 7
	if tr.Detail != "" {
		attrs[n] = slog.String("halt_reason", tr.Detail)
		n++
	}
	if lh, ok := h.(*logline.Handler); ok {
		// sagad's own handler takes the attributes as they are: a record
		// would copy those past its fifth into a slice of its own, and
		// logline writes no source, so needs no program counter.
		_ = lh.HandleAttrs(ctx, time.Now(), slog.LevelInfo, "transition", attrs[:n])
		return
	}
	pc := transitionPC.Load()
	if pc == 0 {
		var pcs [1]uintptr
		runtime.Callers(1, pcs[:])
		pc = pcs[0]
		transitionPC.Store(pc)
	}
	r := slog.NewRecord(time.Now(), slog.LevelInfo, "transition", pc)
	r.AddAttrs(attrs[:n]...)
	_ = h.Handle(ctx, r) // as Logger.LogAttrs: a handler's error is the handler's
}
