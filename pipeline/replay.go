package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/cas"
	"github.com/sagad/sagad/internal/jspub"
)

// Replay runs an ended capsule again from its original bytes, as a new run:
// PIPELINE §7's dead-letter replay (sagad dead-letters nothing: a capsule
// that cannot go on ends halted, or an operator cancelled it, and its bytes
// are kept), once the operator has fixed the cause. Only a halted or
// cancelled capsule is replayed; any other state is refused with a
// [*StateError] and nothing changes.
//
// In order: the ended run's outcome is sent if it was not (and marked on
// the bytes, so RECEPTION knows them for an ended run's, see finishEnd); a
// replayed event records how that run ended, and why and by whom it is
// replayed; its checkpoint, read at revision R, is removed with a
// compare-and-set on R (a conflict re-reads and decides again); the bytes
// go to the intake subject with the Nats-Msg-Id "<key>.replay.<R>".
// RECEPTION then receives them as a new run of the kept bytes of an ended
// run whose checkpoint is gone: a checkpoint, bytes without the old run's
// outcome mark and time to live, and an outcome of its own. The old run's
// outcome stays on the outcome stream. Replaying again, or twice at once,
// starts one run.
//
// A capsule whose checkpoint is gone but whose bytes are kept is published
// again from them: a replay that died after removing the checkpoint (its
// marker names R, so the message id is the same), or a capsule whose
// checkpoint the retention removed first (nothing tells then how it ended:
// it is what publishing the bytes again would do). Neither checkpoint nor
// bytes: [ErrNotFound].
//
// Bad input, kept under the key "x-<intake sequence>", is received again
// under a new key of its own: x-<its new intake sequence> (or its
// capsule_id if the bytes now read as a capsule, after a change of sagad's
// limits or supported versions). Its bytes are published before its old
// record is removed, and the marker records the new intake sequence, so a
// replay that finds the record gone refuses instead of publishing again.
//
// The Status is the new run's as it waits for RECEPTION, in_progress at
// phase 0 (for bad input, under the key x-<new intake sequence>).
func (a *Admin) Replay(ctx context.Context, id, reason, by string) (Status, error) {
	key := id
	if found, err := a.p.checkpoints.Find(ctx, id); err == nil {
		key = found.Key
	} else if !errors.Is(err, ErrNotFound) || !validKey(id) {
		return Status{}, err
	}
	var published uint64 // the intake sequence this call sent bad input at
	var sent *capsule.Checkpoint
	for i := 0; i < maxConflicts; i++ {
		cp, rev, err := a.p.checkpoints.Get(ctx, key)
		if errors.Is(err, ErrNotFound) {
			if published != 0 {
				// Another replay removed the record after ours went out.
				return a.replayed(key, published, sent), nil
			}
			s, again, err := a.replayKept(ctx, key, reason, by)
			if again {
				continue
			}
			return s, err
		}
		if err != nil {
			return Status{}, err
		}
		if st := cp.State.Status; st != capsule.Halted && st != capsule.Cancelled {
			return Status{}, &StateError{Action: "replay", Key: cp.Key, State: st, Hint: "only a halted or cancelled capsule is replayed"}
		}
		raw, err := a.finishEnd(ctx, cp)
		if err != nil {
			return StatusOf(cp), err
		}
		r := strconv.FormatUint(rev, 10)
		msgID := cp.Key + ".replay." + r
		marker := nats.Header{}
		marker.Set(HeaderReplayOf, r)
		detail := replayDetail(cp, reason)
		if badInput(cp.Key) {
			// The new run has a key of its own: publish first, so that
			// the record is only removed once the bytes are on their way.
			if published == 0 {
				if published, err = a.publishIntake(ctx, raw, msgID, cp.TraceID); err != nil {
					return StatusOf(cp), err
				}
				sent = cp
			}
			detail += "; new run: intake message " + strconv.FormatUint(published, 10)
			if err := a.adminEvent(ctx, cp, capsule.EventReplayed, "replay-"+r, detail, by, nil); err != nil {
				return StatusOf(cp), err
			}
			marker.Set(HeaderReplaySeq, strconv.FormatUint(published, 10))
			if _, err := a.p.checkpoints.remove(ctx, cp.Key, rev, marker); errors.Is(err, errConflict) {
				continue
			} else if err != nil {
				return StatusOf(cp), err
			}
			a.p.metrics.AdminAction("replay")
			return a.replayed(cp.Key, published, cp), nil
		}
		// The same key goes on with the new run: the event first (the
		// checkpoint it describes is about to go), then the checkpoint,
		// then the bytes, which RECEPTION would take for a duplicate of
		// the ended run while its checkpoint is there.
		if err := a.adminEvent(ctx, cp, capsule.EventReplayed, "replay-"+r, detail, by, nil); err != nil {
			return StatusOf(cp), err
		}
		if _, err := a.p.checkpoints.remove(ctx, cp.Key, rev, marker); errors.Is(err, errConflict) {
			continue
		} else if err != nil {
			return StatusOf(cp), err
		}
		// From here on a failure is finished by running Replay again:
		// the checkpoint is gone and the marker names R.
		seq, err := a.publishIntake(ctx, raw, msgID, cp.TraceID)
		if err != nil {
			return Status{}, err
		}
		a.p.metrics.AdminAction("replay")
		return a.replayed(cp.Key, seq, cp), nil
	}
	return Status{}, fmt.Errorf("%s: checkpoint keeps changing, try again", id)
}

// finishEnd returns the kept bytes of the ended run cp, after sending its
// outcome if they do not record it yet, and recording it on them: RECEPTION
// tells the bytes of an ended run by that mark, and drops it for the new
// run. The mark is a compare-and-set on the bytes read: bytes renewed since
// by a new run's RECEPTION (another replay went first) stay as they are,
// and so do that run's locks, which have the same holder: a lock the ended
// run did not release expires with its lease.
func (a *Admin) finishEnd(ctx context.Context, cp *capsule.Checkpoint) ([]byte, error) {
	m, err := a.p.stores.capsulesStream.GetLastMsgForSubject(ctx, capsuleSubject(cp.Key))
	if err == nil && kvMarker(m.Header) {
		err = jetstream.ErrMsgNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("capsule bytes of %s: %w", cp.Key, err)
	}
	if mark := m.Header.Get(HeaderOutcomeSent); cp.OutcomeEmitted || mark == outcomeID(cp) || mark == legacyOutcomeMark || len(cp.History) == 0 {
		return m.Data, nil
	}
	tr := cp.History[len(cp.History)-1]
	state, ok := terminalState(tr)
	if !ok {
		return m.Data, nil
	}
	if err := a.p.publish(ctx, outcomeMsg(cp, tr, state, m.Data)); err != nil {
		return nil, fmt.Errorf("outcome of %s: %w", cp.Key, err)
	}
	mark := a.p.outcomeMark(cp, m.Data)
	mark.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(m.Sequence, 10))
	if err := a.p.publish(ctx, mark); err != nil && !cas.Conflict(err) {
		return nil, fmt.Errorf("record the outcome of %s: %w", cp.Key, err)
	}
	return m.Data, nil
}

// replayKept replays a capsule that has no checkpoint from its kept bytes
// (see Replay). again: a checkpoint appeared meanwhile, decide on it.
func (a *Admin) replayKept(ctx context.Context, key, reason, by string) (s Status, again bool, err error) {
	e, err := a.p.stores.capsules.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Status{}, false, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return Status{}, false, fmt.Errorf("capsule bytes of %s: %w", key, err)
	}
	raw := e.Value()
	// What the key's last entry in SAGA_CHECKPOINTS says: a replay's
	// marker, another marker (the retention's, or none left), or a
	// checkpoint written since the read.
	str, err := a.p.js.Stream(ctx, "KV_"+CheckpointsBucket)
	if err != nil {
		return Status{}, false, fmt.Errorf("bucket %s: %w", CheckpointsBucket, err)
	}
	var replayOf, replaySeq string
	m, err := str.GetLastMsgForSubject(ctx, "$KV."+CheckpointsBucket+"."+key)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return Status{}, false, fmt.Errorf("checkpoint of %s: %w", key, err)
	case !kvMarker(m.Header):
		return Status{}, true, nil
	default:
		replayOf, replaySeq = m.Header.Get(HeaderReplayOf), m.Header.Get(HeaderReplaySeq)
	}
	if replaySeq != "" {
		// Bad input whose replay went out before its record was removed.
		hint := "its new run is intake message " + replaySeq
		if cp, _, err := a.p.checkpoints.Get(ctx, "x-"+replaySeq); err == nil {
			hint = fmt.Sprintf("its new run is %s, %s", cp.Key, cp.State.Status)
		}
		return Status{}, false, &StateError{Action: "replay", Key: key, State: "replayed", Hint: hint}
	}
	gone := &capsule.Checkpoint{Key: key}
	if c, err := decodeCapsule(raw); err == nil {
		gone.CapsuleID = c.CapsuleID
	}
	msgID := key + ".replay." + replayOf
	if replayOf == "" {
		// No replay removed the checkpoint: the bytes' revision names
		// this replay instead, and nothing recorded it yet.
		rev := "kept-" + strconv.FormatUint(e.Revision(), 10)
		msgID = key + ".replay." + rev
		detail := "the ended run's checkpoint is gone (retention, or removed): how it ended is not known"
		if reason != "" {
			detail += "; replayed: " + reason
		}
		if err := a.adminEvent(ctx, gone, capsule.EventReplayed, "replay-"+rev, detail, by, nil); err != nil {
			return Status{}, false, err
		}
	}
	seq, err := a.publishIntake(ctx, raw, msgID, "")
	if err != nil {
		return Status{}, false, err
	}
	a.p.metrics.AdminAction("replay")
	return a.replayed(key, seq, gone), false, nil
}

// kvMarker reports whether a KV entry's headers make it a delete or purge
// marker (written by a client, or left by the server when an entry expired).
func kvMarker(h nats.Header) bool {
	return h.Get("KV-Operation") != "" || h.Get(jetstream.MarkerReasonHeader) != ""
}

// badInput reports whether key is one RECEPTION gave to bytes that could not
// be kept under their own capsule id.
func badInput(key string) bool { return strings.HasPrefix(key, "x-") }

// publishIntake sends a capsule's kept bytes to the intake subject and
// returns the intake sequence (the first message's, for a repeat of msgID
// within the de-duplication window).
func (a *Admin) publishIntake(ctx context.Context, raw []byte, msgID, traceID string) (uint64, error) {
	m := nats.NewMsg(IntakeSubject)
	m.Data = raw
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	if traceID != "" {
		// The new run keeps the trace of the one it replaces, unless the
		// capsule names its own.
		m.Header.Set(HeaderTraceID, traceID)
	}
	seq, err := jspub.Publish(ctx, a.p.js.Conn(), m)
	if err != nil {
		return 0, fmt.Errorf("replay: %w", err)
	}
	return seq, nil
}

// replayed is the status of a replay's new run, queued for RECEPTION with
// the intake message at seq.
func (a *Admin) replayed(key string, seq uint64, old *capsule.Checkpoint) Status {
	if badInput(key) {
		key = "x-" + strconv.FormatUint(seq, 10)
	}
	now := a.now().UTC()
	s := Status{
		Key: key, State: capsule.InProgress, Phase: int(capsule.Reception), PhaseName: capsule.Reception.String(),
		ArtifactRefs: []string{}, Findings: []capsule.Finding{}, History: []HistoryEntry{}, CreatedAt: now, UpdatedAt: now,
	}
	if old != nil {
		s.CapsuleID, s.TraceID = old.CapsuleID, old.TraceID
	}
	return s
}

// replayDetail is the replayed event's detail: how the replaced run ended,
// and why it is replayed.
func replayDetail(cp *capsule.Checkpoint, reason string) string {
	st := cp.State
	d := fmt.Sprintf("ended %s at %d %s, cycle %d", st.Status, st.Phase, st.Phase.String(), st.Cycle)
	end := st.HaltReason
	if st.Status == capsule.Cancelled {
		if tr, ok := lastOutcome(cp, capsule.OutcomeCancelled); ok {
			end = tr.Detail
		}
	}
	if end != "" {
		d += " (" + end + ")"
	}
	if reason != "" {
		d += "; replayed: " + reason
	}
	return d
}
