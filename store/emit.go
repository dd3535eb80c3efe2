package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/machine"
)

// Emit publishes what a recorded change of cp means for the world: the
// events of transition tr (nil when the capsule parked without one), the
// next phase's message while the capsule is in progress, the outcome when it
// ended (and the release of its wave reservation), its continuation while
// paused, and the release of its locks.
// Emitting twice is harmless (see the package doc). rev is cp's KV revision
// when the caller just wrote it, 0 when unknown.
func (s *Store) Emit(ctx context.Context, cp *capsule.Checkpoint, rev uint64, tr *capsule.Transition, raw []byte, lockPaths []string) error {
	return s.EmitClaimed(ctx, cp, rev, tr, raw, lockPaths, nil)
}

// EmitClaimed is [Store.Emit] by the writer that just took claim for the
// first delivery of the next phase's message (machine.Decide.Then): that
// message names it (HeaderClaim). Only that writer may send it, once, so
// that one stored message at most carries the claim: a re-emit (Emit)
// sends the message without it.
func (s *Store) EmitClaimed(ctx context.Context, cp *capsule.Checkpoint, rev uint64, tr *capsule.Transition, raw []byte, lockPaths []string, claim *capsule.ExecutionClaim) error {
	fx := machine.EffectsOf(cp, tr)
	if fx.ReleaseLocks && len(lockPaths) > 0 {
		// The release depends on nothing below, nor they on it: it runs
		// alongside, so EXECUTION waits for one round trip, not two. Both
		// are awaited; either failing fails the emit, whose repeat is
		// harmless.
		released := make(chan error, 1)
		go func() { released <- s.Locks.ReleaseAll(ctx, lockPaths, cp.Key) }()
		err := s.emit(ctx, cp, rev, tr, raw, fx, claim)
		if rerr := <-released; rerr != nil && err == nil {
			err = fmt.Errorf("release locks: %w", rerr)
		}
		return err
	}
	return s.emit(ctx, cp, rev, tr, raw, fx, claim)
}

// emit is EmitClaimed without the release of the locks.
func (s *Store) emit(ctx context.Context, cp *capsule.Checkpoint, rev uint64, tr *capsule.Transition, raw []byte, fx machine.Effects, claim *capsule.ExecutionClaim) error {
	if fx.Next != nil {
		// The transition's events are in the checkpoint (CheckpointEvents).
		p := jspub.GetMsg(PhaseSubject(cp.State.Phase), nil)
		phaseHeaders(p.Headers(), cp, "")
		if v, ok := EncodeClaimed(claim); ok {
			p.Headers().Set(HeaderClaim, v)
		}
		err := s.publish(ctx, p.Msg())
		p.Release()
		if err != nil {
			return err
		}
	}
	if fx.Outcome != "" {
		if err := s.releaseWave(ctx, cp); err != nil {
			return err
		}
		if err := s.releaseFamily(ctx, cp); err != nil {
			return err
		}
		// The outcome goes out until its acknowledgement is recorded on the
		// capsule's bytes; a repeat within the de-duplication window is
		// dropped by its Nats-Msg-Id. rev != 0: the caller just recorded
		// the end, so no one has sent its outcome yet.
		send := rev != 0
		if !send {
			sent, err := s.outcomeSent(ctx, cp)
			if err != nil {
				return err
			}
			send = !sent
		}
		if send {
			if err := s.sendOutcome(ctx, cp, *tr, fx.Outcome, raw); err != nil {
				return err
			}
			if err := s.markOutcomeSent(ctx, cp.Key, cp.RunNumber(), raw); err != nil {
				return err
			}
		}
	}
	if fx.Parked {
		if err := s.EmitParked(ctx, cp); err != nil {
			return err
		}
	}
	// A continuation left behind by a capsule that ended while paused is
	// removed by the sweeper, which keeps this hot path free of KV calls.
	return nil
}

// outcomeSent reports whether the outcome of the ended capsule cp was
// acknowledged: its bytes in SAGA_CAPSULES carry the mark markOutcomeSent
// wrote (checkpoints of earlier versions recorded it themselves).
func (s *Store) outcomeSent(ctx context.Context, cp *capsule.Checkpoint) (bool, error) {
	if cp.OutcomeEmitted {
		return true, nil
	}
	rctx, cancel := readCtx(ctx, s.writes())
	m, err := s.capsulesStream.GetLastMsgForSubject(rctx, capsuleSubject(cp.Key))
	cancel()
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("outcome of %s: %w", cp.Key, err)
	}
	// The mark is a run's: a replayed capsule's bytes may still carry the
	// mark of the run before, whose outcome is not this run's.
	return m.Header.Get(HeaderOutcomeSent) != "" && bytesRun(m.Header) == cp.RunNumber(), nil
}

// bytesRun is the run kept capsule bytes belong to (HeaderRun; absent: 1).
func bytesRun(h nats.Header) int {
	n, err := strconv.Atoi(h.Get(HeaderRun))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// markOutcomeSent rewrites an ended capsule's bytes in SAGA_CAPSULES, after
// its outcome was acknowledged, marked so (outcomeSent) and with the
// retention as their time to live. It is the last write of the capsule's
// saga; the checkpoint got the same time to live when it recorded the end.
func (s *Store) markOutcomeSent(ctx context.Context, key string, run int, raw []byte) error {
	p := jspub.GetMsg(capsuleSubject(key), raw)
	h := p.Headers()
	h.Set(HeaderOutcomeSent, "true")
	if run > 1 {
		h.Set(HeaderRun, strconv.Itoa(run))
	}
	if s.retention > 0 {
		h.Set(jetstream.MsgTTLHeader, s.retention.String())
	}
	err := s.publish(ctx, p.Msg())
	p.Release()
	if err != nil {
		return fmt.Errorf("record the outcome of %s: %w", key, err)
	}
	return nil
}

// publish publishes m and waits for its acknowledgement.
func (s *Store) publish(ctx context.Context, m *nats.Msg) error {
	_, err := s.writesFor(m.Subject).Publish(ctx, s.js.Conn(), m)
	return err
}

// PublishPhase sends the capsule to its current phase. token marks a resume.
func (s *Store) PublishPhase(ctx context.Context, cp *capsule.Checkpoint, token string) error {
	m := EncodePhaseMsg(cp, token)
	if err := s.writesFor(m.Subject).Do(ctx, func(ctx context.Context) error { _, err := s.js.PublishMsg(ctx, m); return err }); err != nil {
		return fmt.Errorf("publish to %s: %w", m.Subject, err)
	}
	return nil
}

// sendOutcome publishes the message that emits an ended capsule with its
// original bytes, built in a pooled message: a message of its own, with up
// to a dozen headers, cost six allocations more (its map a table of groups)
// once a capsule.
func (s *Store) sendOutcome(ctx context.Context, cp *capsule.Checkpoint, tr capsule.Transition, state capsule.State, raw []byte) error {
	p := jspub.GetLargeMsg(OutcomeSubject(state), raw)
	outcomeHeaders(p.Headers(), cp, tr, state)
	err := s.publish(ctx, p.Msg())
	p.Release()
	return err
}

// outcomeHeaders sets the headers of an outcome (sendOutcome).
func outcomeHeaders(h *jspub.Headers, cp *capsule.Checkpoint, tr capsule.Transition, state capsule.State) {
	capsuleHeaders(h, cp)
	h.Set(HeaderState, string(state))
	h.Set(HeaderPhase, strconv.Itoa(int(tr.Phase)))
	h.Set(HeaderCycle, strconv.Itoa(tr.Cycle))
	if tr.Detail != "" && state == capsule.Halted {
		h.Set(HeaderHaltReason, tr.Detail)
	}
	if by, verdict, ok := machine.AcceptedOver(cp); ok && state == capsule.Completed {
		h.Set(HeaderAcceptedOver, string(verdict)+" by "+by)
	}
	if len(cp.State.ArtifactRefs) > 0 {
		h.Set(HeaderArtifacts, strings.Join(cp.State.ArtifactRefs, ","))
	}
	if cp.Constitution != "" {
		h.Set(HeaderConstitution, cp.Constitution)
	}
	h.Set(jetstream.MsgIDHeader, OutcomeMsgID(cp))
	if run := cp.RunNumber(); run > 1 {
		h.Set(HeaderRun, strconv.Itoa(run))
	}
}

// OutcomeMsgID is the de-duplication id of cp's outcome message: one outcome
// per run, "<key>.outcome" for the first and "<key>.run<N>.outcome" for a
// replay's run N.
func OutcomeMsgID(cp *capsule.Checkpoint) string {
	if run := cp.RunNumber(); run > 1 {
		return cp.Key + ".run" + strconv.Itoa(run) + ".outcome"
	}
	return cp.Key + ".outcome"
}

// EmitParked records a pause: the continuation (for the triggers that keep
// one) and the paused or waiting event, as the trigger's row of
// capsule.TriggerTable says.
func (s *Store) EmitParked(ctx context.Context, cp *capsule.Checkpoint) error {
	st := cp.State
	info, known := st.ParkedBy()
	kind := info.Event
	if !known {
		kind = capsule.EventPaused
	}
	if !known || info.Continuation {
		// The sweeper finds paused and waiting capsules by their records.
		if err := s.Continuations.Put(ctx, cp); err != nil {
			return err
		}
	}
	return s.PublishEvent(ctx, capsule.Event{
		ID:   fmt.Sprintf("%s.%d.%d.%s.%d", cp.Key, st.Phase, st.Cycle, kind, st.Pause.At.UnixNano()),
		Kind: kind, CapsuleID: cp.CapsuleID, Key: cp.Key, Phase: st.Phase, PhaseName: st.Phase.String(),
		Cycle: st.Cycle, TraceID: cp.TraceID, Detail: string(st.Pause.Trigger) + ": " + st.Pause.Reason,
		By: st.Pause.By, At: st.Pause.At,
	})
}

// capsuleHeaders sets the headers naming cp's capsule.
func capsuleHeaders(h *jspub.Headers, cp *capsule.Checkpoint) {
	h.Set(HeaderKey, cp.Key)
	if cp.CapsuleID != "" {
		h.Set(HeaderCapsuleID, cp.CapsuleID)
	}
	h.Set(HeaderTraceID, cp.TraceID)
}

// PublishEvent publishes one event on its key's events subject.
func (s *Store) PublishEvent(ctx context.Context, ev capsule.Event) error {
	return s.PublishEvents(ctx, ev)
}

// PublishEvents publishes the events of one transition, all of one key, as
// one message; none is nothing to publish.
func (s *Store) PublishEvents(ctx context.Context, evs ...capsule.Event) error {
	if len(evs) == 0 {
		return nil
	}
	m, err := eventMsg(evs...)
	if err != nil {
		return err
	}
	if err := s.writesTo(EventsStream).Do(ctx, func(ctx context.Context) error { _, err := s.js.PublishMsg(ctx, m); return err }); err != nil {
		return fmt.Errorf("publish event %s: %w", evs[len(evs)-1].ID, err)
	}
	return nil
}

// eventMsg is one message holding the events of one transition (a JSON
// array, see capsule.DecodeEvents). A re-emitted message is stored again;
// readers drop repeated events by their deterministic id, which costs less
// than JetStream remembering every id of its de-duplication window.
func eventMsg(evs ...capsule.Event) (*nats.Msg, error) {
	b, err := json.Marshal(evs)
	if err != nil {
		return nil, err
	}
	h := jspub.NewHeaders(2)
	h.Set(HeaderEventID, evs[len(evs)-1].ID)
	h.Set(HeaderTraceID, evs[0].TraceID)
	return jspub.NewMsg(EventSubject(evs[0].Key), b, h), nil
}

// DecodeCapsule decodes capsule bytes kept by RECEPTION (already validated
// there; this is no validation).
func DecodeCapsule(raw []byte) (*capsule.Capsule, error) {
	c := new(capsule.Capsule)
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, err
	}
	c.Canonicalize() // as RECEPTION did: ids compare in one form
	return c, nil
}
