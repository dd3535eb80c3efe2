package natstest_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

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
