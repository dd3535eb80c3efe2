package pipeline

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/store"
)

// TestAdoptable: only the first delivery of the message the claim's writer
// sent adopts the claim, and only while the checkpoint holds that claim as
// written, the capsule in progress at REVIEW of the message's cycle; a
// copy stored outside the writer's window (past the stream's duplicate
// window) does not.
func TestAdoptable(t *testing.T) {
	t.Parallel()
	const lease = 15 * time.Second
	written := time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)
	expires := written.Add(lease)
	named := &store.Claimed{Holder: "a/1", ExpiresAt: expires}
	checkpoint := func(change func(*capsule.Checkpoint)) *capsule.Checkpoint {
		cp := &capsule.Checkpoint{Key: "k"}
		cp.State.Status, cp.State.Phase, cp.State.Cycle = capsule.InProgress, capsule.ReviewPhase, 1
		cp.State.Execution = &capsule.ExecutionClaim{Cycle: 1, Holder: "a/1", ExpiresAt: expires}
		if change != nil {
			change(cp)
		}
		return cp
	}
	first := &jetstream.MsgMetadata{NumDelivered: 1, Timestamp: written.Add(3 * time.Millisecond)}
	tests := []struct {
		name    string
		named   *store.Claimed
		md      *jetstream.MsgMetadata
		mdErr   error
		ph      capsule.Phase
		cp      *capsule.Checkpoint
		noDefer bool
		want    bool
	}{
		{name: "the first delivery of the writer's message", named: named, md: first, cp: checkpoint(nil), want: true},
		{name: "stored just before the claim's time, within the skew", named: named, md: &jetstream.MsgMetadata{NumDelivered: 1, Timestamp: written.Add(-claimSkew)}, cp: checkpoint(nil), want: true},
		{name: "stored within the lease after the write", named: named, md: &jetstream.MsgMetadata{NumDelivered: 1, Timestamp: written.Add(lease)}, cp: checkpoint(nil), want: true},
		{name: "no claim named", md: first, cp: checkpoint(nil)},
		{name: "a redelivery", named: named, md: &jetstream.MsgMetadata{NumDelivered: 2, Timestamp: first.Timestamp}, cp: checkpoint(nil)},
		{name: "no metadata", named: named, md: first, mdErr: errors.New("no metadata"), cp: checkpoint(nil)},
		{name: "a copy stored past the window", named: named, md: &jetstream.MsgMetadata{NumDelivered: 1, Timestamp: written.Add(lease + claimSkew + time.Millisecond)}, cp: checkpoint(nil)},
		{name: "a copy stored past the duplicate window", named: named, md: &jetstream.MsgMetadata{NumDelivered: 1, Timestamp: written.Add(2*time.Minute + time.Second)}, cp: checkpoint(nil)},
		{name: "stored before the claim's time by the writer's clock ahead, within a lease", named: named, md: &jetstream.MsgMetadata{NumDelivered: 1, Timestamp: written.Add(-lease)}, cp: checkpoint(nil), want: true},
		{name: "stored over a lease before the claim's time", named: named, md: &jetstream.MsgMetadata{NumDelivered: 1, Timestamp: written.Add(-lease - time.Millisecond)}, cp: checkpoint(nil)},
		{name: "another holder", named: &store.Claimed{Holder: "b/2", ExpiresAt: expires}, md: first, cp: checkpoint(nil)},
		{name: "renewed since it was written", named: named, md: first, cp: checkpoint(func(cp *capsule.Checkpoint) { cp.State.Execution.ExpiresAt = expires.Add(time.Second) })},
		{name: "taken over", named: named, md: first, cp: checkpoint(func(cp *capsule.Checkpoint) { cp.State.Execution.Holder = "c/3" })},
		{name: "no claim held", named: named, md: first, cp: checkpoint(func(cp *capsule.Checkpoint) { cp.State.Execution = nil })},
		{name: "another cycle's claim", named: named, md: first, cp: checkpoint(func(cp *capsule.Checkpoint) { cp.State.Execution.Cycle = 2 })},
		{name: "paused by a person", named: named, md: first, cp: checkpoint(func(cp *capsule.Checkpoint) {
			cp.State.Status = capsule.Paused
			cp.State.Pause = &capsule.PauseInfo{Trigger: capsule.TriggerOperatorManual}
		})},
		{name: "moved on", named: named, md: first, cp: checkpoint(func(cp *capsule.Checkpoint) { cp.State.Phase = capsule.Handoff })},
		{name: "not REVIEW", named: named, md: first, ph: capsule.Handoff, cp: checkpoint(func(cp *capsule.Checkpoint) { cp.State.Phase = capsule.Handoff })},
		{name: "the reference routine", named: named, md: first, cp: checkpoint(nil), noDefer: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := &Pipeline{cfg: Config{ClaimLease: lease, NoDefer: tc.noDefer}, log: slog.New(slog.DiscardHandler)}
			ph := tc.ph
			if ph == 0 {
				ph = capsule.ReviewPhase
			}
			r := &run{p: p, ph: ph, cycle: 1}
			r.t = &r.txn
			r.t.p, r.t.cp = p, tc.cp
			require.Equal(t, tc.want, r.adoptable(tc.named, tc.md, tc.mdErr))
		})
	}
}
