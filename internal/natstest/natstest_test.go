package natstest_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sagad/sagad/internal/natstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRunServerAndConnect(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	require.True(t, s.JetStreamEnabled())

	nc, js := natstest.Connect(t, s)
	require.True(t, nc.IsConnected())

	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "T"})
	require.NoError(t, err)
	_, err = kv.Put(ctx, "k", []byte("v"))
	require.NoError(t, err)
	e, err := kv.Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, "v", string(e.Value()))
}

func TestServersAreIsolated(t *testing.T) {
	t.Parallel()
	a, b := natstest.RunServer(t), natstest.RunServer(t)
	require.NotEqual(t, a.ClientURL(), b.ClientURL())
	require.NotEqual(t, a.JetStreamConfig().StoreDir, b.JetStreamConfig().StoreDir)
}

func TestEventuallySucceeds(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	natstest.Eventually(t, time.Second, time.Millisecond, func() bool {
		return calls.Add(1) >= 3
	}, "never reached %d calls", 3)
	require.Equal(t, int32(3), calls.Load())
}

// fakeTB records a failure instead of stopping the goroutine.
type fakeTB struct {
	testing.TB
	failure string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) { f.failure = fmt.Sprintf(format, args...) }

func TestEventuallyFailsWithMessage(t *testing.T) {
	t.Parallel()
	ft := &fakeTB{TB: t}
	natstest.Eventually(ft, 20*time.Millisecond, time.Millisecond, func() bool { return false }, "lock %s still held", "a")
	require.Contains(t, ft.failure, "lock a still held")
}

func TestClusterKillRestart(t *testing.T) {
	t.Parallel()
	c := natstest.RunCluster(t, 3)
	require.NotNil(t, c.MetaLeader())

	nc, err := nats.Connect(c.URLs(0))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}, Replicas: 3})
	require.NoError(t, err)
	leader := c.WaitForStreamLeader("S")
	follower := c.Follower("S")
	require.NotEqual(t, -1, follower)
	require.NotEqual(t, leader, follower)

	// A follower goes away and comes back at the same address with its data.
	c.Kill(follower)
	require.Nil(t, c.Node(follower))
	// The client may have been connected to the killed node: it reconnects,
	// and a publish whose answer was lost with the node is tried again (its
	// message id keeps it single).
	natstest.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.Publish(pctx, "s", []byte("1"), jetstream.WithMsgID("1"))
		return err == nil
	}, "no publish after a follower was killed")
	c.Restart(follower)
	require.Equal(t, follower, c.Index(c.Node(follower)))

	// The stream leader goes away: another node takes the stream over.
	c.Kill(leader)
	next := c.WaitForStreamLeader("S")
	require.NotEqual(t, leader, next)
	natstest.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.Publish(pctx, "s", []byte("2"), jetstream.WithMsgID("2"))
		return err == nil
	}, "no publish after the leader was killed")
	c.Restart(leader)
	s, err := js.Stream(ctx, "S")
	require.NoError(t, err)
	require.Equal(t, uint64(2), s.CachedInfo().State.Msgs)
}

// TestFormingCluster: a new cluster started with one node of three has no
// meta leader; it elects one once the others join.
func TestFormingCluster(t *testing.T) {
	t.Parallel()
	c := natstest.FormingCluster(t, 3, 1)
	require.Nil(t, c.Node(1))
	require.Nil(t, c.MetaLeader(), "one node of three has no quorum")
	c.Start(1, 2)
	require.NotNil(t, c.MetaLeader())
	require.NotNil(t, c.Node(2))
}
