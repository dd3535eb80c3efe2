package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/sagatest"
	"github.com/sagad/sagad/store"
)

// pausedState returns phase ph's state as admin.Phases reports it.
func pausedState(t *testing.T, a *admin.Admin, ph capsule.Phase) admin.PhaseState {
	t.Helper()
	states, err := a.Phases(context.Background())
	require.NoError(t, err)
	return states[ph]
}

// TestPhasePauseRecord: a phase pause records who paused, when and why;
// a second pause keeps the first record; the record survives sagad
// re-creating its topology (a restart); a resume clears it, and only
// paused phases are listed as such.
func TestPhasePauseRecord(t *testing.T) {
	t.Parallel()
	f := sagatest.Setup(t)
	a := f.Admin(t)
	ctx := context.Background()
	before := time.Now().Add(-time.Second)

	require.NoError(t, a.PausePhaseBy(ctx, capsule.Execution, "alice", "storage maintenance"))
	got := pausedState(t, a, capsule.Execution)
	require.True(t, got.Paused)
	require.Equal(t, "alice", got.PausedBy)
	require.Equal(t, "storage maintenance", got.PauseReason)
	require.NotNil(t, got.PausedAt)
	require.True(t, got.PausedAt.After(before), "paused at %s", got.PausedAt)
	first := *got.PausedAt

	require.NoError(t, a.PausePhaseBy(ctx, capsule.Execution, "bob", "again"))
	got = pausedState(t, a, capsule.Execution)
	require.Equal(t, "alice", got.PausedBy, "a repeated pause keeps the first record")
	require.Equal(t, first, *got.PausedAt)

	_, err := store.Ensure(ctx, f.JS, store.Topology{Workspace: f.Workspace, Logger: f.Logger})
	require.NoError(t, err)
	got = pausedState(t, a, capsule.Execution)
	require.True(t, got.Paused, "a restart keeps the pause")
	require.Equal(t, "alice", got.PausedBy, "and its record")
	require.Equal(t, first, *got.PausedAt)

	paused, err := a.Phases(ctx)
	require.NoError(t, err)
	require.Len(t, admin.PausedPhases(paused), 1)

	require.NoError(t, a.ResumePhase(ctx, capsule.Execution))
	got = pausedState(t, a, capsule.Execution)
	require.False(t, got.Paused)
	require.Empty(t, got.PausedBy)
	require.Nil(t, got.PausedAt)
	info := f.PhaseConsumer(t, capsule.Execution)
	_, found, err := capsule.PhasePauseOf(info.Config.Metadata)
	require.NoError(t, err)
	require.False(t, found, "the resume removed the record")

	// Paused again by someone else: a new record, not the old one.
	require.NoError(t, a.PausePhaseBy(ctx, capsule.Execution, "bob", ""))
	got = pausedState(t, a, capsule.Execution)
	require.Equal(t, "bob", got.PausedBy)
	require.Empty(t, got.PauseReason)
	require.True(t, got.PausedAt.After(first) || got.PausedAt.Equal(first))
}

// TestPhasePauseForeignRecord: a pause record someone else wrote into the
// consumer's metadata that does not read is ignored, the pause dated from
// its pause_until instead; a pause without any record (another tool's) is
// listed without who.
func TestPhasePauseForeignRecord(t *testing.T) {
	t.Parallel()
	f := sagatest.Setup(t)
	a := f.Admin(t)
	ctx := context.Background()
	stream, name := store.PhaseStream(capsule.Planning), store.ConsumerName(capsule.Planning)
	cfg := f.PhaseConsumer(t, capsule.Planning).Config
	cfg.Metadata = map[string]string{capsule.PhasePauseAtKey: "not a time", capsule.PhasePauseByKey: "mallory"}
	_, err := f.JS.UpdateConsumer(ctx, stream, cfg)
	require.NoError(t, err)
	pausedAt := time.Now().Add(-3 * time.Hour).Truncate(time.Second)
	_, err = f.JS.PauseConsumer(ctx, stream, name, pausedAt.Add(capsule.PhasePauseHorizon))
	require.NoError(t, err)

	got := pausedState(t, a, capsule.Planning)
	require.True(t, got.Paused)
	require.Empty(t, got.PausedBy, "an unreadable record names no one")
	require.NotNil(t, got.PausedAt)
	require.WithinDuration(t, pausedAt, *got.PausedAt, time.Second)
}
