package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/natstest"
)

// TestEnsureRefusesDrift: a sagad asking for another retention than the
// streams and buckets were made with refuses, names each difference and the
// flag that matches, and changes nothing; Migrate changes them.
func TestEnsureRefusesDrift(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := Ensure(ctx, js, Topology{Retention: time.Hour})
	require.NoError(t, err)

	changes, err := PlanTopology(ctx, js, Topology{Retention: time.Hour})
	require.NoError(t, err)
	require.Empty(t, changes, "the same configuration changes nothing")

	_, err = Ensure(ctx, js, Topology{Retention: 2 * time.Hour})
	var drift *DriftError
	require.True(t, errors.As(err, &drift), "%v", err)
	require.ErrorContains(t, err, "stream SAGA_EVENTS: max age 1h0m0s, asked 2h0m0s (start with --retention 1h0m0s, or --migrate to change it)")
	require.ErrorContains(t, err, "object store SAGA_ARTIFACTS: ttl 1h0m0s, asked 2h0m0s (start with --retention 1h0m0s")
	require.ErrorContains(t, err, "bucket SAGA_ARTIFACT_RECORDS: ttl 1h0m0s, asked 2h0m0s (start with --retention 1h0m0s")
	for _, c := range drift.Changes {
		require.Equal(t, "--retention 1h0m0s", c.Flag, "only what the retention sets differs: %s", c)
	}
	events, err := js.Stream(ctx, EventsStream)
	require.NoError(t, err)
	require.Equal(t, time.Hour, events.CachedInfo().Config.MaxAge, "nothing changed")

	_, err = Ensure(ctx, js, Topology{Retention: 2 * time.Hour, Migrate: true})
	require.NoError(t, err)
	events, err = js.Stream(ctx, EventsStream)
	require.NoError(t, err)
	require.Equal(t, 2*time.Hour, events.CachedInfo().Config.MaxAge, "migrated")
}

// TestEnsureAppliesUpgrades: a subject added to a stream and limit markers
// on a bucket that had none are what a newer sagad needs; they are applied
// without Migrate. A subject the stream has beyond those asked for (a newer
// sagad added it) is kept: an older sagad neither refuses nor drops it.
func TestEnsureAppliesUpgrades(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := Ensure(ctx, js, Topology{})
	require.NoError(t, err)
	intake, err := js.Stream(ctx, IntakeStream)
	require.NoError(t, err)
	cfg := intake.CachedInfo().Config
	asked := append([]string(nil), cfg.Subjects...)

	// A newer sagad's subject: kept, and no difference.
	_, err = js.UpdateStream(ctx, withSubjects(cfg, append(asked, "saga.newer.only")))
	require.NoError(t, err)
	changes, err := PlanTopology(ctx, js, Topology{})
	require.NoError(t, err)
	require.Empty(t, changes)
	_, err = Ensure(ctx, js, Topology{})
	require.NoError(t, err)
	intake, err = js.Stream(ctx, IntakeStream)
	require.NoError(t, err)
	require.Contains(t, intake.CachedInfo().Config.Subjects, "saga.newer.only", "kept")

	// An older topology without one of the subjects asked for: an upgrade.
	_, err = js.UpdateStream(ctx, withSubjects(cfg, []string{"saga.older.only"}))
	require.NoError(t, err)
	changes, err = PlanTopology(ctx, js, Topology{})
	require.NoError(t, err)
	require.Len(t, changes, 1)
	require.True(t, changes[0].Upgrade, "adding a subject is an upgrade: %s", changes[0])
	require.Equal(t, "subjects", changes[0].Setting)
	_, err = Ensure(ctx, js, Topology{})
	require.NoError(t, err)
	intake, err = js.Stream(ctx, IntakeStream)
	require.NoError(t, err)
	require.ElementsMatch(t, append([]string{"saga.older.only"}, asked...), intake.CachedInfo().Config.Subjects)

	cmp := compareStream("bucket", CheckpointsBucket,
		jetstream.StreamConfig{Replicas: 1, MaxMsgsPerSubject: 1},
		kvStreamConfig(jetstream.KeyValueConfig{Bucket: CheckpointsBucket, LimitMarkerTTL: time.Second}), 0, "ttl")
	require.Len(t, cmp, 1)
	require.True(t, cmp[0].Upgrade, "markers where there were none: %s", cmp[0])
	require.Equal(t, "bucket SAGA_CHECKPOINTS: marker ttl none, asked 1s (an upgrade: applied)", cmp[0].String())
}

func withSubjects(c jetstream.StreamConfig, subjects []string) jetstream.StreamConfig {
	c.Subjects = append([]string(nil), subjects...)
	return c
}

// TestCompareStreamNamesTheFlag: replicas name --replicas with the value
// found; settings no flag sets say so.
func TestCompareStreamNamesTheFlag(t *testing.T) {
	t.Parallel()
	found := jetstream.StreamConfig{Replicas: 3, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute}
	asked := jetstream.StreamConfig{Replicas: 1, Storage: jetstream.MemoryStorage, Duplicates: 2 * time.Minute}
	got := compareStream("stream", "SAGA_PHASE_1", found, asked, 0, "max age")
	require.Len(t, got, 2)
	require.Equal(t, "stream SAGA_PHASE_1: replicas 3, asked 1 (start with --replicas 3, or --migrate to change it)", got[0].String())
	require.Equal(t, "stream SAGA_PHASE_1: storage File, asked Memory (no flag sets it: --migrate to change it)", got[1].String())
	// A stream kept forever (max age none) is what a negative --retention asks.
	got = compareStream("stream", EventsStream, jetstream.StreamConfig{}, jetstream.StreamConfig{MaxAge: time.Hour}, time.Hour, "max age")
	require.Equal(t, "stream SAGA_EVENTS: max age none, asked 1h0m0s (start with --retention -1s, or --migrate to change it)", got[0].String())
}
