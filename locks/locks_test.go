package locks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/locks"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// clock is a fake clock safe for concurrent use.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type fixture struct {
	ctx   context.Context
	s     *server.Server
	js    jetstream.JetStream
	clock *clock
	m     *locks.Manager
}

const lease = 30 * time.Second

func setup(t *testing.T) *fixture {
	t.Helper()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	f := &fixture{ctx: context.Background(), s: s, js: js, clock: newClock()}
	f.m = f.manager(t, js, "sagad-1")
	return f
}

// manager returns another Manager on the fixture's bucket and clock.
func (f *fixture) manager(t *testing.T, js jetstream.JetStream, owner string) *locks.Manager {
	t.Helper()
	m, err := locks.New(f.ctx, js, locks.Config{Lease: lease, Owner: owner, Now: f.clock.Now})
	require.NoError(t, err)
	return m
}

// stored reads path's lock straight from the bucket.
func (f *fixture) stored(t *testing.T, path string) map[string]any {
	t.Helper()
	kv, err := f.js.KeyValue(f.ctx, "SAGA_LOCKS")
	require.NoError(t, err)
	e, err := kv.Get(f.ctx, locks.Key(path))
	require.NoError(t, err)
	var v map[string]any
	require.NoError(t, json.Unmarshal(e.Value(), &v))
	return v
}

func (f *fixture) requireHolder(t *testing.T, path, want string) {
	t.Helper()
	got, err := f.m.Holder(f.ctx, path)
	require.NoError(t, err)
	require.Equal(t, want, got, "holder of %s", path)
}

func TestAcquireRelease(t *testing.T) {
	t.Parallel()
	f := setup(t)

	require.NoError(t, f.m.TryAcquire(f.ctx, "src/a", "cap-1"))
	f.requireHolder(t, "src/a", "cap-1")
	t0 := f.clock.Now()
	require.Equal(t, map[string]any{
		"path":        "src/a",
		"holder":      "cap-1",
		"owner":       "sagad-1",
		"acquired_at": t0.Format(time.RFC3339Nano),
		"expires_at":  t0.Add(lease).Format(time.RFC3339Nano),
	}, f.stored(t, "src/a"))

	ok, err := f.m.Available(f.ctx, "src/a", "cap-1")
	require.NoError(t, err)
	require.True(t, ok, "own lock is available")
	ok, err = f.m.Available(f.ctx, "src/a", "cap-2")
	require.NoError(t, err)
	require.False(t, ok)

	require.NoError(t, f.m.Release(f.ctx, "src/a", "cap-1"))
	f.requireHolder(t, "src/a", "")
	ok, err = f.m.Available(f.ctx, "src/a", "cap-2")
	require.NoError(t, err)
	require.True(t, ok)

	// Taking a lock again writes over the delete marker Release left.
	require.NoError(t, f.m.TryAcquire(f.ctx, "src/a", "cap-2"))
	f.requireHolder(t, "src/a", "cap-2")
}

func TestReacquireBySameHolderRenews(t *testing.T) {
	t.Parallel()
	f := setup(t)
	t0 := f.clock.Now()
	require.NoError(t, f.m.TryAcquire(f.ctx, "a", "cap-1"))

	// A redelivery of the capsule, on another sagad process, later on.
	f.clock.Advance(10 * time.Second)
	other := f.manager(t, f.js, "sagad-2")
	require.NoError(t, other.TryAcquire(f.ctx, "a", "cap-1"))

	v := f.stored(t, "a")
	require.Equal(t, "cap-1", v["holder"])
	require.Equal(t, "sagad-2", v["owner"])
	require.Equal(t, t0.Format(time.RFC3339Nano), v["acquired_at"], "acquired_at kept")
	require.Equal(t, t0.Add(10*time.Second+lease).Format(time.RFC3339Nano), v["expires_at"], "lease extended")
}

func TestSecondHolderRefused(t *testing.T) {
	t.Parallel()
	f := setup(t)
	require.NoError(t, f.m.TryAcquire(f.ctx, "a", "cap-1"))

	err := f.m.TryAcquire(f.ctx, "a", "cap-2")
	require.ErrorIs(t, err, locks.ErrHeld)
	var held *locks.HeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, locks.HeldError{Path: "a", Holder: "cap-1", Owner: "sagad-1", ExpiresAt: f.clock.Now().Add(lease)}, *held)
	require.Contains(t, err.Error(), "cap-1")
	f.requireHolder(t, "a", "cap-1")
}

func TestAcquireAllIsAllOrNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	require.NoError(t, f.m.TryAcquire(f.ctx, "b", "cap-x"))

	err := f.m.AcquireAll(f.ctx, []string{"c", "a", "b", "a"}, "cap-y")
	var ae *locks.AcquireError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, "b", ae.Path)
	require.ErrorIs(t, err, locks.ErrHeld)
	f.requireHolder(t, "a", "")
	f.requireHolder(t, "b", "cap-x")
	f.requireHolder(t, "c", "")

	require.NoError(t, f.m.Release(f.ctx, "b", "cap-x"))
	require.NoError(t, f.m.AcquireAll(f.ctx, []string{"c", "a", "b", "a"}, "cap-y"))
	for _, p := range []string{"a", "b", "c"} {
		f.requireHolder(t, p, "cap-y")
	}
	require.NoError(t, f.m.ReleaseAll(f.ctx, []string{"a", "b", "c"}, "cap-y"))
	for _, p := range []string{"a", "b", "c"} {
		f.requireHolder(t, p, "")
	}
}

func TestAcquireAllFailureReleasesLocksHeldBefore(t *testing.T) {
	t.Parallel()
	f := setup(t)
	// cap-y kept "a" from an earlier delivery; this one gives up on all.
	require.NoError(t, f.m.TryAcquire(f.ctx, "a", "cap-y"))
	require.NoError(t, f.m.TryAcquire(f.ctx, "c", "cap-x"))

	err := f.m.AcquireAll(f.ctx, []string{"a", "b", "c"}, "cap-y")
	var ae *locks.AcquireError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, "c", ae.Path)
	f.requireHolder(t, "a", "")
	f.requireHolder(t, "b", "")
	f.requireHolder(t, "c", "cap-x")
}

func TestReleaseIsIdempotent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	require.NoError(t, f.m.Release(f.ctx, "never-locked", "cap-1"))

	require.NoError(t, f.m.TryAcquire(f.ctx, "a", "cap-1"))
	require.NoError(t, f.m.Release(f.ctx, "a", "cap-2"), "release by a non-holder is a no-op")
	f.requireHolder(t, "a", "cap-1")

	require.NoError(t, f.m.Release(f.ctx, "a", "cap-1"))
	require.NoError(t, f.m.Release(f.ctx, "a", "cap-1"))
	f.requireHolder(t, "a", "")
}

func TestExpiredLeaseIsTakenOver(t *testing.T) {
	t.Parallel()
	f := setup(t)
	require.NoError(t, f.m.TryAcquire(f.ctx, "a", "cap-1"))

	f.clock.Advance(lease) // expires_at == now: still live
	require.ErrorIs(t, f.m.TryAcquire(f.ctx, "a", "cap-2"), locks.ErrHeld)

	f.clock.Advance(time.Nanosecond)
	f.requireHolder(t, "a", "")
	ok, err := f.m.Available(f.ctx, "a", "cap-2")
	require.NoError(t, err)
	require.True(t, ok)

	require.NoError(t, f.m.TryAcquire(f.ctx, "a", "cap-2"))
	f.requireHolder(t, "a", "cap-2")
	require.Equal(t, f.clock.Now().Format(time.RFC3339Nano), f.stored(t, "a")["acquired_at"])

	// The old holder has lost it: renewing says so, releasing does nothing.
	err = f.m.Renew(f.ctx, []string{"a"}, "cap-1")
	require.ErrorIs(t, err, locks.ErrNotHeld)
	require.ErrorIs(t, err, locks.ErrHeld)
	require.NoError(t, f.m.Release(f.ctx, "a", "cap-1"))
	f.requireHolder(t, "a", "cap-2")
}

func TestRenewExtendsLease(t *testing.T) {
	t.Parallel()
	f := setup(t)
	require.NoError(t, f.m.AcquireAll(f.ctx, []string{"a", "b"}, "cap-1"))

	f.clock.Advance(20 * time.Second)
	require.NoError(t, f.m.Renew(f.ctx, []string{"a", "b"}, "cap-1"))
	want := f.clock.Now().Add(lease).Format(time.RFC3339Nano)
	require.Equal(t, want, f.stored(t, "a")["expires_at"])
	require.Equal(t, want, f.stored(t, "b")["expires_at"])

	f.clock.Advance(20 * time.Second) // 40s after acquisition
	f.requireHolder(t, "a", "cap-1")
	f.requireHolder(t, "b", "cap-1")

	require.ErrorIs(t, f.m.Renew(f.ctx, []string{"a", "free"}, "cap-1"), locks.ErrNotHeld)
	f.requireHolder(t, "free", "")
}

// TestRaceExactlyOneWins races 16 holders through two Managers on separate
// connections, as two sagad processes would, for a fresh lock, a released one
// (Create over a delete marker) and an expired one (Update).
func TestRaceExactlyOneWins(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, js2 := natstest.Connect(t, f.s)
	managers := []*locks.Manager{f.m, f.manager(t, js2, "sagad-2")}

	race := func(round string) string {
		t.Helper()
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			mu      sync.Mutex
			winners []string
		)
		for i, m := range managers {
			for g := range 8 {
				holder := fmt.Sprintf("%s-%d-%d", round, i, g)
				wg.Go(func() {
					<-start
					err := m.TryAcquire(f.ctx, "contended", holder)
					switch {
					case err == nil:
						mu.Lock()
						winners = append(winners, holder)
						mu.Unlock()
					case !errors.Is(err, locks.ErrHeld):
						t.Errorf("%s: unexpected error: %v", holder, err)
					}
				})
			}
		}
		close(start)
		wg.Wait()
		require.Len(t, winners, 1, "round %s: winners %v", round, winners)
		f.requireHolder(t, "contended", winners[0])
		return winners[0]
	}

	require.NoError(t, f.m.Release(f.ctx, "contended", race("fresh")))
	prev := race("released")
	before := f.stored(t, "contended")
	require.Equal(t, prev, before["holder"])
	oldExpiry := storedTime(t, before, "expires_at")

	// The released round's lease runs out; every racer now finds a lock to
	// take over (an Update at the expired lease's revision), not a free one.
	f.clock.Advance(lease + time.Second)
	f.requireHolder(t, "contended", "")
	winner := race("expired")
	after := f.stored(t, "contended")
	require.Equal(t, winner, after["holder"], "the stored lock is the winner's")
	require.Equal(t, f.clock.Now().Format(time.RFC3339Nano), after["acquired_at"], "taken over, not renewed")
	newExpiry := storedTime(t, after, "expires_at")
	require.Equal(t, f.clock.Now().Add(lease), newExpiry)
	require.True(t, newExpiry.After(oldExpiry), "new lease %s ends after the old %s", newExpiry, oldExpiry)

	// The previous holder cannot renew it or keep it by releasing.
	err := f.m.Renew(f.ctx, []string{"contended"}, prev)
	require.ErrorIs(t, err, locks.ErrNotHeld)
	var held *locks.HeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, winner, held.Holder)
	require.NoError(t, f.m.Release(f.ctx, "contended", prev))
	f.requireHolder(t, "contended", winner)
}

// storedTime parses the RFC 3339 time field of a stored lock.
func storedTime(t *testing.T, v map[string]any, field string) time.Time {
	t.Helper()
	s, ok := v[field].(string)
	require.True(t, ok, "%s is a string: %v", field, v[field])
	ts, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return ts
}

func TestKeyIsValidAndDistinct(t *testing.T) {
	t.Parallel()
	f := setup(t)
	paths := []string{"src/a", "src/a/", "SRC/A", "../x", ".hidden", "with space", "ünï/cödé", "a.b", "*", ">"}
	seen := map[string]string{}
	for _, p := range paths {
		k := locks.Key(p)
		require.Regexp(t, "^[0-9a-f]{64}$", k)
		require.NotContains(t, seen, k, "%q and %q share a key", p, seen[k])
		seen[k] = p
		require.NoError(t, f.m.TryAcquire(f.ctx, p, "cap-"+k[:8]), p)
	}
	for _, p := range paths {
		f.requireHolder(t, p, "cap-"+locks.Key(p)[:8])
	}
}

func TestInvalidArguments(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"acquire with empty path", func() error { return f.m.TryAcquire(f.ctx, "", "cap-1") }, "locks: empty path"},
		{"acquire with empty holder", func() error { return f.m.TryAcquire(f.ctx, "a", "") }, `locks: "a": empty holder`},
		{"acquire all with empty path", func() error { return f.m.AcquireAll(f.ctx, []string{"a", ""}, "cap-1") }, "locks: empty path"},
		{"release with empty path", func() error { return f.m.Release(f.ctx, "", "cap-1") }, "locks: empty path"},
		{"release with empty holder", func() error { return f.m.Release(f.ctx, "a", "") }, `locks: "a": empty holder`},
		{"renew with empty path", func() error { return f.m.Renew(f.ctx, []string{""}, "cap-1") }, "locks: empty path"},
		{"negative lease", func() error {
			_, err := locks.New(f.ctx, f.js, locks.Config{Bucket: "OTHER", Lease: -time.Second})
			return err
		}, "locks: lease must be positive, got -1s"},
		{"negative replicas", func() error {
			_, err := locks.New(f.ctx, f.js, locks.Config{Bucket: "OTHER", Replicas: -1})
			return err
		}, "locks: replicas must be at least 1, got -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
			require.NotErrorIs(t, err, locks.ErrHeld)
			require.NotErrorIs(t, err, locks.ErrNotHeld)
		})
	}
	// Refused before anything was written.
	f.requireHolder(t, "a", "")
	_, err := f.js.KeyValue(f.ctx, "OTHER")
	require.ErrorIs(t, err, jetstream.ErrBucketNotFound, "an invalid config creates no bucket")
}

// TestReacquireAfterReleaseElsewhere: a Manager takes a lock again over the
// purge marker its own release left (one compare-and-set on the marker's
// revision), and falls back to reading the lock when another Manager wrote
// it since, whether that one holds it or released it in turn.
func TestReacquireAfterReleaseElsewhere(t *testing.T) {
	t.Parallel()
	f := setup(t)
	other := f.manager(t, f.js, "sagad-2")

	require.NoError(t, f.m.TryAcquire(f.ctx, "src/a", "cap-1"))
	require.NoError(t, f.m.Release(f.ctx, "src/a", "cap-1"))
	require.NoError(t, f.m.TryAcquire(f.ctx, "src/a", "cap-1"), "over its own marker")
	f.requireHolder(t, "src/a", "cap-1")
	require.NoError(t, f.m.Release(f.ctx, "src/a", "cap-1"))

	// Another Manager takes it: the remembered marker is stale.
	require.NoError(t, other.TryAcquire(f.ctx, "src/a", "cap-2"))
	var held *locks.HeldError
	require.ErrorAs(t, f.m.TryAcquire(f.ctx, "src/a", "cap-1"), &held)
	require.Equal(t, "cap-2", held.Holder)

	// … and releases it: its marker is newer than the one remembered.
	require.NoError(t, other.Release(f.ctx, "src/a", "cap-2"))
	require.NoError(t, f.m.TryAcquire(f.ctx, "src/a", "cap-1"))
	f.requireHolder(t, "src/a", "cap-1")
}
