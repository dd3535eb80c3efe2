package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/sagatest"
	"github.com/sagad/sagad/schemas"
	"github.com/sagad/sagad/store"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// digest1 and digest2 stand for the SHA-256 of two capsules' bytes.
var (
	digest1 = strings.Repeat("a1", 32)
	digest2 = strings.Repeat("b2", 32)
)

// TestCheckpointsCompareAndSet: a capsule's first checkpoint is created
// once; an update names the revision it read, and one against a revision
// that moved on is ErrConflict and changes nothing. Get, Find (by id, in
// either case) and List read what was written.
func TestCheckpointsCompareAndSet(t *testing.T) {
	t.Parallel()
	f := sagatest.Setup(t)
	ctx := context.Background()
	cps := f.Store.Checkpoints
	id := capsuletest.NewID()
	cp := store.NewCheckpoint(id, id, "trace", "", digest1, t0)
	require.NoError(t, schemas.ValidateValue(schemas.Checkpoint, cp))

	rev, err := cps.Create(ctx, cp)
	require.NoError(t, err)
	_, err = cps.Create(ctx, cp)
	require.ErrorIs(t, err, store.ErrConflict, "a second first checkpoint")

	next := cp.Clone()
	next.State.Phase, next.State.PhaseName = capsule.RealityAnchor, capsule.RealityAnchor.String()
	rev2, err := cps.UpdateForTest(ctx, next, rev)
	require.NoError(t, err)
	require.Greater(t, rev2, rev)
	stale := cp.Clone()
	stale.State.Status = capsule.Cancelled
	_, err = cps.UpdateForTest(ctx, stale, rev)
	require.ErrorIs(t, err, store.ErrConflict, "an update against a revision that moved on")

	got, gotRev, err := cps.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, rev2, gotRev)
	require.Equal(t, capsule.RealityAnchor, got.State.Phase)
	require.Equal(t, capsule.InProgress, got.State.Status, "the stale update changed nothing")

	found, err := cps.Find(ctx, strings.ToUpper(id))
	require.NoError(t, err)
	require.Equal(t, id, found.Key)
	_, _, err = cps.Get(ctx, capsuletest.NewID())
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = cps.Find(ctx, capsuletest.NewID())
	require.ErrorIs(t, err, store.ErrNotFound)

	other := capsuletest.NewID()
	_, err = cps.Create(ctx, store.NewCheckpoint(other, other, "trace", "", digest2, t0.Add(time.Second)))
	require.NoError(t, err)
	all, err := cps.List(ctx)
	require.NoError(t, err)
	require.Len(t, all, 2)
	require.Equal(t, []string{id, other}, []string{all[0].Key, all[1].Key}, "oldest first")
}

// TestKeptBytes: RECEPTION keeps a capsule's bytes once — a second keep
// under the key is jetstream.ErrKeyExists and leaves the first bytes; they
// read back as kept, compare by digest, and carry no outcome mark; bytes
// never kept are ErrNotFound, and bytes that are no capsule kept under an
// intake key are ErrNotACapsule.
func TestKeptBytes(t *testing.T) {
	t.Parallel()
	f := sagatest.Setup(t)
	ctx := context.Background()
	doc := capsuletest.New()
	raw := doc.Sealed(t)
	digest, err := capsule.Digest(raw)
	require.NoError(t, err)

	require.NoError(t, f.Store.KeepBytes(ctx, doc.ID(), raw))
	other := capsuletest.New().Set("capsule_id", doc.ID()).Set("task.description", "other").Sealed(t)
	require.ErrorIs(t, f.Store.KeepBytes(ctx, doc.ID(), other), jetstream.ErrKeyExists)

	kept, c, err := f.Store.Kept(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, raw, kept, "the first bytes stay")
	require.Equal(t, doc.ID(), c.CapsuleID)
	same, ended, err := f.Store.KeptBytes(ctx, doc.ID(), digest)
	require.NoError(t, err)
	require.True(t, same)
	require.False(t, ended, "no run ended yet")
	same, _, err = f.Store.KeptBytes(ctx, doc.ID(), "not-the-digest")
	require.NoError(t, err)
	require.False(t, same)

	_, _, err = f.Store.Kept(ctx, capsuletest.NewID())
	require.ErrorIs(t, err, store.ErrNotFound)
	require.NoError(t, f.Store.KeepBytes(ctx, "x-17", []byte("not json")))
	_, _, err = f.Store.Kept(ctx, "x-17")
	require.ErrorIs(t, err, store.ErrNotACapsule)
	rawBack, dec, err := f.Store.Raw(ctx, "x-17")
	require.NoError(t, err, "bad input is kept verbatim")
	require.Equal(t, []byte("not json"), rawBack)
	require.Nil(t, dec)
}

// TestContinuations: a paused checkpoint's continuation is written, listed
// and read back valid against its schema; DeleteIfStale keeps the record
// of the pause the checkpoint is in and removes it once the capsule moved
// on; deleting a missing record is fine.
func TestContinuations(t *testing.T) {
	t.Parallel()
	f := sagatest.Setup(t)
	ctx := context.Background()
	conts := f.Store.Continuations
	id := capsuletest.NewID()
	cp := store.NewCheckpoint(id, id, "trace", "", digest1, t0)
	cp.State.Status = capsule.Paused
	cp.State.Phase, cp.State.PhaseName, cp.State.Cycle = capsule.Execution, capsule.Execution.String(), 1
	cp.State.Pause = &capsule.PauseInfo{Trigger: capsule.TriggerOperatorManual, Reason: "look", By: "alice", At: t0}
	cp.UpdatedAt = t0

	require.NoError(t, conts.Put(ctx, cp))
	keys, err := conts.Keys(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{id}, keys)
	c, err := conts.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, store.ContinuationOf(cp), c)
	require.Equal(t, capsule.TriggerOperatorManual, c.Trigger)
	require.Equal(t, "alice", c.By)
	require.NoError(t, schemas.ValidateValue(schemas.Continuation, c))

	require.NoError(t, conts.DeleteIfStale(ctx, id, cp))
	_, err = conts.Get(ctx, id)
	require.NoError(t, err, "the record of the current pause stays")

	moved := cp.Clone()
	moved.State.Status, moved.State.Pause = capsule.InProgress, nil
	moved.UpdatedAt = t0.Add(time.Second)
	require.NoError(t, conts.DeleteIfStale(ctx, id, moved))
	_, err = conts.Get(ctx, id)
	require.ErrorIs(t, err, store.ErrNotFound, "a pause the capsule left is forgotten")
	keys, err = conts.Keys(ctx)
	require.NoError(t, err)
	require.Empty(t, keys)
	require.NoError(t, conts.Delete(ctx, id), "deleting a missing record is fine")
}

// TestPublishEvent: an event published by the store is on the capsule's
// events subject, and a client's history of the capsule holds it once
// even when it is published again (the events stream de-duplicates by
// event id).
func TestPublishEvent(t *testing.T) {
	t.Parallel()
	f := sagatest.Setup(t)
	ctx := context.Background()
	id := capsuletest.NewID()
	ev := capsule.Event{
		ID: id + ".test.paused", Kind: capsule.EventPaused, CapsuleID: id, Key: id,
		Phase: capsule.Execution, PhaseName: capsule.Execution.String(), Cycle: 1, TraceID: "trace",
		Detail: "look", By: "alice", At: t0,
	}
	require.NoError(t, f.Store.PublishEvent(ctx, ev))
	require.NoError(t, f.Store.PublishEvent(ctx, ev))
	events, err := f.Client.History(ctx, id)
	require.NoError(t, err)
	require.Len(t, events, 1)
	require.Equal(t, ev.ID, events[0].ID)
	require.Equal(t, capsule.EventPaused, events[0].Kind)
	require.Equal(t, "alice", events[0].By)
	require.True(t, t0.Equal(events[0].At))
}

// TestEmitParked: a parked capsule's event says why it is parked, and every
// park but the operator gate leaves a continuation for the sweeper to find;
// emitting the same park again adds no event.
func TestEmitParked(t *testing.T) {
	t.Parallel()
	f := sagatest.Setup(t)
	ctx := context.Background()
	for _, tc := range []struct {
		state        capsule.State
		trigger      capsule.Trigger
		kind         capsule.EventKind
		continuation bool
	}{
		{capsule.Paused, capsule.TriggerBudgetWarning, capsule.EventPaused, true},
		{capsule.Paused, capsule.TriggerDeadlineApproaching, capsule.EventPaused, true},
		{capsule.Paused, capsule.TriggerOperatorManual, capsule.EventPaused, true},
		{capsule.Paused, capsule.TriggerLockContention, capsule.EventPaused, true},
		{capsule.Paused, capsule.TriggerBlockedExternal, capsule.EventPaused, true},
		// Kept, so the sweeper finds a decision that is not taken by the deadline.
		{capsule.WaitingForOperator, capsule.TriggerOperatorGate, capsule.EventWaiting, true},
		{capsule.Waiting, capsule.TriggerDependencies, capsule.EventDependencyWait, true},
		{capsule.Waiting, capsule.TriggerWaveCapacity, capsule.EventWaveWait, true},
	} {
		t.Run(string(tc.trigger), func(t *testing.T) {
			id := capsuletest.NewID()
			cp := store.NewCheckpoint(id, id, "trace", "", digest1, t0)
			cp.State.Status = tc.state
			cp.State.Phase, cp.State.PhaseName, cp.State.Cycle = capsule.Execution, capsule.Execution.String(), 1
			cp.State.Pause = &capsule.PauseInfo{Trigger: tc.trigger, Reason: "why", By: "alice", At: t0}
			require.NoError(t, f.Store.EmitParked(ctx, cp))
			require.NoError(t, f.Store.EmitParked(ctx, cp))

			events, err := f.Client.History(ctx, id)
			require.NoError(t, err)
			require.Len(t, events, 1)
			require.Equal(t, tc.kind, events[0].Kind)
			require.Equal(t, string(tc.trigger)+": why", events[0].Detail)
			require.Equal(t, "alice", events[0].By)

			c, err := f.Store.Continuations.Get(ctx, id)
			if !tc.continuation {
				require.ErrorIs(t, err, store.ErrNotFound)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.trigger, c.Trigger)
			require.Equal(t, capsule.Execution, c.Phase)
		})
	}
}
