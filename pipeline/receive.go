package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/internal/tracing"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/phases"
	"github.com/sagad/sagad/runner"
	"github.com/sagad/sagad/store"
)

// receive runs RECEPTION for one intake message: it decides the capsule's key,
// keeps its bytes, writes its first checkpoint (create-only, so a capsule is
// received once) and emits the effects.
func (p *Pipeline) receive(ctx context.Context, msg jetstream.Msg) runner.Delivery {
	meta, err := msg.Metadata()
	if err != nil {
		return runner.Retry(fmt.Errorf("reception: metadata: %w", err))
	}
	start := p.cfg.Now()
	raw := msg.Data()
	producer := intakeProducer(msg)
	if wait := p.rate.take(producer, len(raw)); wait > 0 {
		// Over its rate: the message waits in the intake (bounded by the
		// producer's quota there), nothing of it is kept yet.
		return runner.NakAfter(wait, nil)
	}
	fallbackKey := "x-" + strconv.FormatUint(meta.Sequence.Stream, 10)
	r := phases.Receive(ctx, p.env, raw, func(id string) string { return id })
	r.Decision = p.corruptDecision(r.Decision)
	if r.Decision.Action == phases.Retry {
		return runner.NakAfter(r.Decision.Delay, r.Decision.Err)
	}
	link, member, err := p.ownership(ctx, msg, meta.Sequence.Stream, producer, &r)
	if err != nil {
		return runner.Retry(err)
	}
	key, keptNow, staleEnd, err := p.keep(ctx, r, raw, fallbackKey, member)
	if err != nil {
		return runner.Retry(err)
	}
	if link.parent != "" && r.Decision.Action != phases.Halt {
		// Before the child's checkpoint, so a crash in between leaves a
		// link its redelivery adds again (AddChild is idempotent).
		if err := p.st.Budgets.AddChild(ctx, link.parent, link.grandparent, key, link.caps); err != nil {
			return runner.Retry(fmt.Errorf("reception: link to parent: %w", err))
		}
	}

	now := p.cfg.Now().UTC()
	fresh := p.freshCheckpoint(msg, r, key, meta.Sequence.Stream, producer, link, start, now)
	tctx, root := p.traceReception(ctx, msg.Headers(), fresh, start)
	end := receptionEnd{p: p, ctx: tctx, root: root, cp: fresh, d: r.Decision, start: start}
	defer end.end()
	res, err := machine.Apply(fresh, machine.Decide{Phase: capsule.Reception, Decision: r.Decision}, now)
	if err != nil || res.Transition == nil {
		// RECEPTION decides advance or halt; anything else is a bug that
		// must not lose the bytes: they stay kept, the message is retried.
		return runner.Retry(fmt.Errorf("reception: %s decision: %w", r.Decision.Action, err))
	}
	cp, tr := res.Checkpoint, *res.Transition
	rev, err := p.st.Checkpoints.Create(ctx, cp)
	if errors.Is(err, store.ErrConflict) {
		rev, err = p.receivedOverCorrupt(ctx, key, cp, raw, r.Capsule, keptNow)
	}
	if errors.Is(err, errCorruptHalted) {
		return runner.Ack() // halted state_corrupt, its end emitted
	}
	if errors.Is(err, store.ErrConflict) {
		return p.receivedBefore(ctx, key, meta.Sequence.Stream, raw, r.Capsule)
	} else if err != nil {
		return runner.Retry(fmt.Errorf("reception: create checkpoint: %w", err))
	}
	if staleEnd {
		// The bytes are those of an earlier run of this capsule that ended
		// and whose checkpoint the retention already removed (the bytes go
		// a moment later): this is a new run, so its bytes must not carry
		// that run's outcome mark and time to live.
		if err := p.st.RenewBytes(ctx, key, raw); err != nil {
			return runner.Retry(fmt.Errorf("reception: keep bytes: %w", err))
		}
	}
	p.st.Cache.Put(cp, rev)
	if r.Capsule != nil && cp.State.Status == capsule.InProgress {
		p.st.Cache.Seed(key, raw, r.Capsule)
	}
	p.metrics.Received()
	end.end() // before a capsule that ended here records its root span
	p.observe(cp, &tr, r.Decision, 0)
	if err := p.st.Emit(ctx, cp, rev, &tr, raw, lockPathsOf(r.Capsule)); err != nil {
		return runner.Retry(err)
	}
	return runner.Ack()
}

// ownership applies who may publish what: chain membership is sagad's to
// assign (package compose), an executor's account publishes only child
// capsules, and a child's parent must be verified by the token of the call
// it serves. A refusal becomes r's decision (a halt); err is a lookup that
// failed and should be retried. member says r's bytes are exactly a
// composition step sagad recorded (its id, run, step and digest).
func (p *Pipeline) ownership(ctx context.Context, msg jetstream.Msg, seq uint64, producer string, r *phases.Received) (parentLink, bool, error) {
	member := false
	if r.Capsule != nil && r.Capsule.Chain != nil {
		// A capsule declaring a step sagad did not give it is refused, and
		// kept under its intake sequence, so it never takes the id. The
		// digest is the one computed from the bytes, so a step RECEPTION
		// halts (a deadline passed since sagad published it) is sagad's
		// own bytes or none.
		ok, err := p.chainMember(ctx, producer, r.Capsule, r.Digest)
		if err != nil {
			return parentLink{}, false, fmt.Errorf("reception: chain %q: %w", r.Capsule.Chain.ID, err)
		}
		member = ok
		if !ok && r.Decision.Action != phases.Halt {
			r.Decision = phases.HaltWith(capsule.ChainMembershipRefused(r.Capsule.Chain.ID, r.Capsule.Chain.Step), capsule.Finding{
				Field: "chain", Message: "sagad did not assign this capsule to step " + strconv.Itoa(r.Capsule.Chain.Step) +
					" of chain " + strconv.Quote(r.Capsule.Chain.ID) + " (chains are published with sagactl publish --chain)",
			})
		}
	}
	if err := p.stepIDTaken(ctx, r); err != nil {
		return parentLink{}, false, err
	}
	if strings.HasPrefix(producer, store.ExecutorProducerPrefix) && r.Capsule != nil && r.Decision.Action != phases.Halt && r.Capsule.ParentCapsuleID == "" {
		// An executor's account may delegate, not publish work of its own.
		r.Decision = phases.HaltWith(capsule.ParentRefused(""), capsule.Finding{
			Field: "parent_capsule_id", Message: "an executor's account publishes only child capsules: parent_capsule_id and the " + store.HeaderParentToken + " header of the call it serves",
		})
	}
	if r.Capsule == nil || r.Capsule.ParentCapsuleID == "" || r.Decision.Action == phases.Halt {
		return parentLink{}, member, nil
	}
	link, stop, err := p.parentOf(ctx, r.Capsule, msg.Headers().Get(store.HeaderParentToken), seq)
	if err != nil {
		return parentLink{}, false, fmt.Errorf("reception: parent %q: %w", r.Capsule.ParentCapsuleID, err)
	}
	if stop != nil {
		r.Decision = *stop
	}
	return link, member, nil
}

// stepIDTaken refuses a capsule that declares no chain membership under
// an id sagad assigned to a composition step: the id is known before the
// step is published (the compose reply names a step held after a loop),
// and sagad's own bytes for a step always declare its membership, which
// chainMember checks. Refused, the capsule is kept under its intake
// sequence and never takes the id, so the step still runs under it, as
// sagad built it; the halt names no chain, which may be another
// producer's.
func (p *Pipeline) stepIDTaken(ctx context.Context, r *phases.Received) error {
	if r.Capsule == nil || r.Capsule.Chain != nil || r.Decision.Action == phases.Halt || p.st.Compositions == nil {
		return nil
	}
	taken, err := p.st.Compositions.IsStepID(ctx, r.Capsule.CapsuleID)
	if err != nil {
		return fmt.Errorf("reception: %w", err)
	}
	if taken {
		r.Decision = phases.HaltWith(capsule.StepIDRefused(), capsule.Finding{
			Field: "capsule_id", Message: "capsule id " + strconv.Quote(r.Capsule.CapsuleID) +
				" belongs to a step sagad assigned to a composition: only sagad publishes that step",
		})
	}
	return nil
}

// freshCheckpoint is the checkpoint RECEPTION creates for the capsule kept
// under key, before its decision is applied.
func (p *Pipeline) freshCheckpoint(msg jetstream.Msg, r phases.Received, key string, seq uint64, producer string, link parentLink, start, now time.Time) *capsule.Checkpoint {
	fresh := store.NewCheckpoint(key, claimedID(r), traceID(r.Capsule, msg), waveID(r.Capsule), r.Digest, now)
	if r.Capsule != nil {
		fresh.Chain = r.Capsule.Chain.Member()
	}
	fresh.IntakeSeq = seq
	fresh.Producer = producer
	fresh.Constitution = p.constitution
	// The capsule arrived when its message was taken: its root span starts
	// there, before RECEPTION's.
	fresh.CreatedAt = start.UTC()
	if r.Decision.Action != phases.Halt {
		fresh.Parent, fresh.Depth = link.parent, link.depth
		d := r.Capsule.Deadline
		if link.parent != "" && d.After(link.deadline) {
			// A child inherits its parent's deadline as an upper bound:
			// it is the deadline in force (the checkpoint records it
			// among the overrides), which an operator may still extend.
			d = link.deadline
		}
		if fresh.ChildLimit = childLimit(link.child, fresh.CreatedAt); fresh.ChildLimit != nil {
			if w := fresh.ChildLimit.WallUntil; w != nil && w.Before(d) {
				d = *w // the parent's max_wall_time binds it sooner
			}
		}
		if !d.Equal(r.Capsule.Deadline) {
			d = d.UTC()
			fresh.State.Overrides = &capsule.Overrides{Deadline: &d}
		}
	}
	return fresh
}

// childLimit is what a parent's budget.child allows a child received at
// start: nil when it sets nothing.
func childLimit(b *capsule.ChildBudget, start time.Time) *capsule.ChildLimit {
	if b == nil || (b.MaxAttempts == 0 && b.WallTime() <= 0) {
		return nil
	}
	l := &capsule.ChildLimit{MaxAttempts: b.MaxAttempts}
	if w := b.WallTime(); w > 0 {
		until := start.Add(w).UTC()
		l.WallUntil = &until
	}
	return l
}

// keep keeps the capsule's bytes and decides its key: its id when RECEPTION
// lets it through (or it is a composition step sagad recorded: member) and
// the id is free or holds these same bytes, else fallbackKey. keptNow says
// this delivery kept the bytes (no earlier run had them), staleEnd that the
// kept bytes are an ended, forgotten run's.
func (p *Pipeline) keep(ctx context.Context, r phases.Received, raw []byte, fallbackKey string, member bool) (key string, keptNow, staleEnd bool, err error) {
	key = fallbackKey
	// Only a capsule RECEPTION lets through owns its id: one it halts (a bad
	// digest, a deadline in the past, …) is kept under its intake sequence,
	// so the corrected capsule can still run under the id. But sagad gave a
	// composition step its id: halted, it ends there, so its run records
	// the end and the steps that need it halt dependency_failed instead of
	// waiting for an id that would never have a checkpoint.
	if r.Capsule != nil && (r.Decision.Action != phases.Halt || member) {
		key = r.Capsule.CapsuleID
		if !store.ValidKey(key) {
			key = fallbackKey
		}
	}
	if key != fallbackKey {
		// First writer of an id owns it. The same bytes again are the same
		// capsule (a redelivery or a duplicate publish); other bytes under a
		// taken id are a different capsule, kept under its own key so that
		// AUTOMATED_GATES can refuse it (Rule 2) without touching the first.
		err := p.st.KeepBytes(ctx, key, raw)
		keptNow = err == nil
		if errors.Is(err, jetstream.ErrKeyExists) {
			same, ended, err := p.st.KeptBytes(ctx, key, r.Digest)
			if err != nil {
				return "", false, false, err
			}
			if !same {
				key = fallbackKey
			}
			staleEnd = same && ended
		} else if err != nil {
			return "", false, false, fmt.Errorf("reception: keep capsule: %w", err)
		}
	}
	if key == fallbackKey {
		// Create, not Put: a redelivered intake message must not erase what
		// its first delivery recorded on the bytes (the outcome mark).
		err := p.st.KeepBytes(ctx, key, raw)
		if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return "", false, false, fmt.Errorf("reception: keep bytes: %w", err)
		}
		keptNow = err == nil
	}
	return key, keptNow, staleEnd, nil
}

// receivedBefore handles an intake message whose capsule already has its
// checkpoint under key: a duplicate publish is recorded (once), and the
// recorded transition's effects are emitted again.
func (p *Pipeline) receivedBefore(ctx context.Context, key string, intakeSeq uint64, raw []byte, c *capsule.Capsule) runner.Delivery {
	existing, _, err := p.st.Checkpoints.Get(ctx, key)
	if err != nil {
		return runner.Retry(err)
	}
	if existing.IntakeSeq != intakeSeq { // not our own redelivery
		if err := p.duplicateIgnored(ctx, existing, intakeSeq); err != nil {
			return runner.Retry(err)
		}
	}
	return p.reemitFor(ctx, existing, capsule.Reception, 0, raw, lockPathsOf(c))
}

// lockPathsOf is the locks capsule c (nil: bytes that are no capsule) needs.
func lockPathsOf(c *capsule.Capsule) []string {
	if c == nil {
		return nil
	}
	return c.Constraints.ResourceLocksRequired
}

// intakeProducer is the producer an intake message came from. A producer's
// account maps its saga.intake onto saga.intake.<producer>, so the subject
// names it and it cannot name another; the plain subject is sagad's own
// account (""). A name that is no producer name is recorded as "?" (a
// misconfigured mapping, never a real producer).
func intakeProducer(msg jetstream.Msg) string {
	subj := msg.Subject()
	if subj == store.IntakeSubject {
		return ""
	}
	p, ok := strings.CutPrefix(subj, store.IntakeProducerPrefix)
	if !ok || p == "" || !store.ValidProducer(p) {
		return "?"
	}
	return p
}

// chainMember reports whether sagad assigned c its declared chain step for
// producer.
func (p *Pipeline) chainMember(ctx context.Context, producer string, c *capsule.Capsule, digest string) (bool, error) {
	if p.st.Compositions == nil || digest == "" {
		return false, nil
	}
	return p.st.Compositions.IsMember(ctx, producer, c.Chain.ID, c.Chain.Run, c.Chain.Step, c.CapsuleID, digest)
}

// duplicateIgnored records, once per intake message, that a capsule was
// published again and not run again.
func (p *Pipeline) duplicateIgnored(ctx context.Context, cp *capsule.Checkpoint, intakeSeq uint64) error {
	ev := capsule.Event{
		ID: cp.Key + ".dup." + strconv.FormatUint(intakeSeq, 10), Kind: capsule.EventDuplicateIgnored,
		CapsuleID: cp.CapsuleID, Key: cp.Key, Phase: capsule.Reception, PhaseName: capsule.Reception.String(),
		TraceID: cp.TraceID, Detail: "intake message " + strconv.FormatUint(intakeSeq, 10) + " repeats this capsule", At: p.cfg.Now().UTC(),
	}
	return p.st.PublishEvent(ctx, ev)
}

// claimedID is the capsule id the bytes claimed, if it is printable and short;
// bytes that could not be read at all have none.
func claimedID(r phases.Received) string {
	if r.Capsule != nil {
		return r.Capsule.CapsuleID
	}
	id := r.ClaimedID
	if len(id) > 128 {
		return ""
	}
	for _, c := range id {
		if !unicode.IsPrint(c) {
			return ""
		}
	}
	return id
}

func waveID(c *capsule.Capsule) string {
	if c == nil {
		return ""
	}
	return c.WaveID
}

// traceID takes the capsule's trace id, else the message's, else makes one.
func traceID(c *capsule.Capsule, msg jetstream.Msg) string {
	if c != nil && c.TraceID != "" {
		return c.TraceID
	}
	if h := msg.Headers().Get(store.HeaderTraceID); h != "" && len(h) <= 128 {
		return h
	}
	// W3C trace context, validated: a malformed header is ignored.
	if tid := tracing.TraceIDOfTraceparent(incomingTraceparent(msg.Headers())); tid != "" {
		return tid
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// errCorruptHalted: RECEPTION found a checkpoint sagad did not write under
// a key whose bytes an earlier delivery kept, and halted the capsule.
var errCorruptHalted = errors.New("reception: the checkpoint under the key is corrupt: halted")

// receivedOverCorrupt decides, after cp's create found key taken, whether
// what holds it is a checkpoint sagad did not write (JetStream's answer to
// a publish, sent onto a future key by a client naming it as its reply
// subject, is one). If not, it returns store.ErrConflict: the key is
// another delivery's. If it is, the value is reported once and replaced:
// by cp when this delivery kept the capsule's bytes (no run of it can have
// begun, so the capsule runs as if the key had been free), else by a
// checkpoint halted state_corrupt (errCorruptHalted): an earlier run's
// state is lost, and running again could repeat its work.
func (p *Pipeline) receivedOverCorrupt(ctx context.Context, key string, cp *capsule.Checkpoint, raw []byte, c *capsule.Capsule, keptNow bool) (uint64, error) {
	_, _, err := p.st.Checkpoints.GetLatest(ctx, key, nil)
	e, ok := corrupt.As(err)
	if !ok {
		return 0, store.ErrConflict
	}
	if !keptNow {
		p.corrupt.Report(err, "the capsule halts state_corrupt")
		if _, err := p.replaceCorrupt(ctx, key, raw, c, e.Revision, capsule.StateCorrupt(e.Bucket)); err != nil {
			return 0, err
		}
		return 0, errCorruptHalted
	}
	p.corrupt.Report(err, "replaced by the capsule received under its key")
	return p.st.ReplaceCorrupt(ctx, cp, e.Revision)
}

// DefaultMaxDepth is [Config.MaxDepth]'s default: a root capsule's
// descendants may nest four deep.
const DefaultMaxDepth = 4

// parentLink is a child capsule's verified link to its parent.
type parentLink struct {
	parent, grandparent string
	depth               int
	// caps are the parent's caps in force, which bound its own spend plus
	// its descendants'.
	caps capsule.Budget
	// deadline is the parent's deadline in force: the child's upper bound.
	deadline time.Time
	// child is the parent's budget.child: the limits of each child.
	child *capsule.ChildBudget
}

// parentOf verifies c's parent_capsule_id: the parent must be a capsule
// with an executor call in flight whose call_token is token (its claim's,
// or, for accepted work, the completion token it awaits), and the child's
// depth must not pass the --max-depth. A redelivery of the intake message
// that created c's checkpoint takes the link recorded then: the parent's
// call may have ended since.
func (p *Pipeline) parentOf(ctx context.Context, c *capsule.Capsule, token string, intakeSeq uint64) (parentLink, *phases.Decision, error) {
	refuse := func(why string) (parentLink, *phases.Decision, error) {
		d := phases.HaltWith(capsule.ParentRefused(c.ParentCapsuleID), capsule.Finding{Field: "parent_capsule_id", Message: why})
		return parentLink{}, &d, nil
	}
	key := c.ParentCapsuleID
	if key == c.CapsuleID {
		return refuse("a capsule cannot be its own parent")
	}
	own, _, err := p.st.Checkpoints.Get(ctx, c.CapsuleID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return parentLink{}, nil, err
	}
	redelivered := own != nil && own.IntakeSeq == intakeSeq && own.Parent == key
	parent, _, err := p.st.Checkpoints.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return refuse("no capsule " + strconv.Quote(key) + " is known")
	} else if err != nil {
		return parentLink{}, nil, err
	}
	if !redelivered && !callInFlight(parent, token, p.cfg.Now()) {
		if token == "" {
			return refuse("no " + store.HeaderParentToken + " header: a child capsule carries the call_token of the parent's executor call that publishes it")
		}
		return refuse("the " + store.HeaderParentToken + " header is not the token of a call capsule " + strconv.Quote(key) + " has in flight")
	}
	depth := parent.Depth + 1
	if depth > p.cfg.MaxDepth {
		d := phases.HaltWith(capsule.DepthExceeded(depth), capsule.Finding{
			Field: "parent_capsule_id", Message: "depth " + strconv.Itoa(depth) + " is over sagad's --max-depth of " + strconv.Itoa(p.cfg.MaxDepth),
		})
		return parentLink{}, &d, nil
	}
	_, pc, err := p.st.Raw(ctx, key)
	if err != nil {
		return parentLink{}, nil, err
	}
	if pc == nil {
		return refuse("capsule " + strconv.Quote(key) + " is no capsule sagad runs")
	}
	return parentLink{parent: key, grandparent: parent.Parent, depth: depth, caps: parent.State.Caps(pc.Budget),
		deadline: parent.State.DeadlineIn(pc.Deadline), child: pc.Budget.Child}, nil, nil
}

// callInFlight reports whether token is the secret of an executor call cp
// has in flight: its live EXECUTION claim's call token, or the completion
// token of the accepted work it awaits.
func callInFlight(cp *capsule.Checkpoint, token string, now time.Time) bool {
	if token == "" || cp.Terminal() {
		return false
	}
	st := cp.State
	if ex := st.Execution; ex != nil && st.Status == capsule.InProgress && st.Phase == capsule.Execution &&
		ex.Cycle == st.Cycle && ex.CallTokenHash != "" && now.Before(ex.ExpiresAt) &&
		executors.CompletionTokenMatches(ex.CallTokenHash, token) {
		return true
	}
	return st.AwaitingTokenHash != "" && executors.CompletionTokenMatches(st.AwaitingTokenHash, token)
}

// receptionEnd ends RECEPTION's span once, on whichever path of receive
// comes first (one goroutine calls it): a value on receive's stack, where
// sync.OnceFunc's closure and state were allocated for every capsule and
// took the received capsule to the heap with them.
type receptionEnd struct {
	p     *Pipeline
	ctx   context.Context
	root  trace.Span
	cp    *capsule.Checkpoint
	d     phases.Decision // r.Decision: not changed once the checkpoint is made
	start time.Time
	done  bool
}

func (e *receptionEnd) end() {
	if !e.done {
		e.done = true
		e.p.endReception(e.ctx, e.root, e.cp, e.d, e.start)
	}
}
