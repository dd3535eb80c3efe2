package locks_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/locks"
)

// readCounter counts the reads of the locks bucket any client sends, seen
// by a subscriber of its own on the server.
type readCounter struct {
	nc     *nats.Conn
	ch     chan *nats.Msg
	marker string
}

func countReads(t *testing.T, f *fixture) *readCounter {
	t.Helper()
	nc, _ := natstest.Connect(t, f.s)
	rc := &readCounter{nc: nc, ch: make(chan *nats.Msg, 4096), marker: "_test.marker." + nuid.Next()}
	for _, subj := range []string{"$JS.API.DIRECT.GET.KV_SAGA_LOCKS.>", "$JS.API.STREAM.MSG.GET.KV_SAGA_LOCKS", rc.marker} {
		_, err := nc.ChanSubscribe(subj, rc.ch)
		require.NoError(t, err)
	}
	require.NoError(t, nc.Flush())
	return rc
}

// take returns the reads the server routed since the last take: a read is
// routed to this subscriber before its answer is sent, and the marker
// published after it comes after it on this connection.
func (rc *readCounter) take(t *testing.T) int {
	t.Helper()
	require.NoError(t, rc.nc.Publish(rc.marker, nil))
	n := 0
	for {
		select {
		case m := <-rc.ch:
			if m.Subject == rc.marker {
				return n
			}
			n++
		case <-time.After(10 * time.Second):
			t.Fatal("the marker never came back")
		}
	}
}

// available is m.Available(path, holder) and the reads it cost.
func available(t *testing.T, f *fixture, rc *readCounter, m *locks.Manager, path, holder string) (bool, int) {
	t.Helper()
	rc.take(t)
	ok, err := m.Available(f.ctx, path, holder)
	require.NoError(t, err)
	return ok, rc.take(t)
}

// TestMirrorAnswersFreeWithoutARead: while the mirror runs, a free lock
// costs RECEPTION no read; a held one is read before it is reported held,
// so a mirror behind the bucket never refuses a free lock; once the mirror
// stops, every answer is read again.
func TestMirrorAnswersFreeWithoutARead(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rc := countReads(t, f)
	other := f.manager(t, f.js, "sagad-2")
	require.NoError(t, other.TryAcquire(f.ctx, "src/held", "cap-1"))

	ok, reads := available(t, f, rc, f.m, "src/free", "cap-2")
	require.True(t, ok)
	require.Equal(t, 1, reads, "no mirror yet: the lock is read")

	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	require.NoError(t, f.m.Mirror(ctx))
	require.NoError(t, f.m.Mirror(ctx), "a second call leaves the running mirror be")
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		ok, reads := available(t, f, rc, f.m, "src/free", "cap-2")
		return ok && reads == 0
	}, "the mirror answers a free lock")
	for range 5 {
		ok, reads := available(t, f, rc, f.m, "src/free-"+nuid.Next(), "cap-2")
		require.True(t, ok)
		require.Zero(t, reads)
	}

	ok, reads = available(t, f, rc, f.m, "src/held", "cap-2")
	require.False(t, ok, "held by cap-1")
	require.Equal(t, 1, reads, "held is read, not taken from the mirror")
	ok, _ = available(t, f, rc, f.m, "src/held", "cap-1")
	require.True(t, ok, "a holder's own lock is available to it")

	// Released by another process: at once free, whether or not the mirror
	// has seen the release yet.
	require.NoError(t, other.Release(f.ctx, "src/held", "cap-1"))
	ok, _ = available(t, f, rc, f.m, "src/held", "cap-2")
	require.True(t, ok)
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		ok, reads := available(t, f, rc, f.m, "src/held", "cap-2")
		return ok && reads == 0
	}, "the mirror saw the release")

	// Taken by another process: the mirror sees it, and the read confirms.
	require.NoError(t, other.TryAcquire(f.ctx, "src/held", "cap-3"))
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		ok, reads := available(t, f, rc, f.m, "src/held", "cap-2")
		return !ok && reads == 1
	}, "the mirror saw the acquisition")

	cancel()
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		ok, reads := available(t, f, rc, f.m, "src/free", "cap-2")
		return ok && reads == 1
	}, "a stopped mirror answers nothing: the lock is read")
	again, stop := context.WithCancel(f.ctx)
	defer stop()
	require.NoError(t, f.m.Mirror(again), "a mirror starts again once the last one's context ended")
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		ok, reads := available(t, f, rc, f.m, "src/free", "cap-2")
		return ok && reads == 0
	}, "the new mirror answers")
}

// TestMirrorSeesOwnAcquireAtOnce: a lock this process takes is held in its
// mirror before the watch brings it back, so RECEPTION in the same sagad
// reads it (and finds it held) however far the watch is behind.
func TestMirrorSeesOwnAcquireAtOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rc := countReads(t, f)
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	require.NoError(t, f.m.Mirror(ctx))
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		ok, reads := available(t, f, rc, f.m, "src/warm", "cap-2")
		return ok && reads == 0
	}, "the mirror answers a free lock")
	for i := range 20 {
		path := "src/own-" + nuid.Next()
		require.NoError(t, f.m.TryAcquire(f.ctx, path, "cap-1"))
		ok, reads := available(t, f, rc, f.m, path, "cap-2")
		require.False(t, ok, "round %d: taken by this process a moment ago", i)
		require.Equal(t, 1, reads, "round %d: held is read", i)
	}
}
