package runner_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/runner"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRedeliveryInFlightIsNotHandledTwice: a handler stuck past AckWait
// (say on a blocked write) gets its message redelivered to the same
// process; the copy is handed back and counted, never given to a second
// handler, and the first handler's ack settles the message.
func TestRedeliveryInFlightIsNotHandledTwice(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}})
	require.NoError(t, err)
	_, err = js.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{
		Durable: "C", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 200 * time.Millisecond, MaxDeliver: -1,
	})
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.BuildInfo{})
	counter := func() float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "sagad_redeliveries_in_flight_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return 0
	}
	logs := &syncBuffer{}
	var calls, progressed atomic.Int32
	release := make(chan struct{})
	c, err := runner.Start(ctx, ctx, js, "S", "C", runner.Config{
		Workers: 4, Metrics: m, BusyDelay: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Progress: func(consumer string) {
			require.Equal(t, "C", consumer)
			progressed.Add(1)
		},
	}, func(ctx context.Context, msg jetstream.Msg) runner.Delivery {
		calls.Add(1)
		<-release
		return runner.Ack()
	})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "s", []byte("x"))
	require.NoError(t, err)

	// AckWait runs out twice over while the handler is stuck.
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { return counter() >= 2 },
		"the redeliveries were never seen")
	require.EqualValues(t, 1, calls.Load(), "a second handler ran for the same message")
	require.Zero(t, progressed.Load())
	require.Equal(t, 1, strings.Count(logs.String(), "handed back"), "logged once per message: %s", logs.String())

	close(release)
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		info, err := js.Consumer(ctx, "S", "C")
		require.NoError(t, err)
		ci := info.CachedInfo()
		return ci.NumAckPending == 0 && ci.NumPending == 0 && ci.AckFloor.Stream == 1
	}, "the first handler's ack did not settle the message")
	c.Stop()
	require.EqualValues(t, 1, calls.Load())
	require.EqualValues(t, 1, progressed.Load())
	n, err := testutil.GatherAndCount(reg, "sagad_redeliveries_in_flight_total")
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// syncBuffer is a log destination the test reads while the consumer writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestHandlerSeesEachDeliverysMetadata: the metadata a handler reads is its
// own delivery's (read once by the consumer, not parsed again): the stream
// sequence of its message and, after a nak, the delivery count of the
// redelivery, with the message's data and subject alongside.
func TestHandlerSeesEachDeliverysMetadata(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	require.NoError(t, err)
	_, err = js.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "C", AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)

	type seen struct {
		seq, delivered uint64
		data, subject  string
	}
	var mu sync.Mutex
	var got []seen
	c, err := runner.Start(ctx, ctx, js, "S", "C", runner.Config{Workers: 2, RetryDelay: 20 * time.Millisecond},
		func(ctx context.Context, msg jetstream.Msg) runner.Delivery {
			md, err := msg.Metadata()
			require.NoError(t, err)
			again, err := msg.Metadata()
			require.NoError(t, err)
			require.Equal(t, md, again)
			mu.Lock()
			got = append(got, seen{md.Sequence.Stream, md.NumDelivered, string(msg.Data()), msg.Subject()})
			mu.Unlock()
			if md.NumDelivered == 1 {
				return runner.Retry(nil)
			}
			return runner.Ack()
		})
	require.NoError(t, err)
	defer c.Stop()
	for _, d := range []string{"a", "b", "c"} {
		_, err = js.Publish(ctx, "s."+d, []byte(d))
		require.NoError(t, err)
	}
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 6
	}, "every message twice")
	mu.Lock()
	defer mu.Unlock()
	for i, d := range []string{"a", "b", "c"} {
		var n int
		for _, g := range got {
			if g.seq == uint64(i+1) {
				require.Equal(t, d, g.data)
				require.Equal(t, "s."+d, g.subject)
				n++
				require.EqualValues(t, n, g.delivered, "deliveries of %s in order", d)
			}
		}
		require.Equal(t, 2, n, "%s delivered twice", d)
	}
}

// BenchmarkMetadata is what a handler's second msg.Metadata() cost before
// the consumer handed it the metadata it had read (nats.go parses the reply
// subject and allocates at every call).
func BenchmarkMetadata(b *testing.B) {
	s := natstest.RunServer(b)
	_, js := natstest.Connect(b, s)
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}})
	require.NoError(b, err)
	cons, err := js.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "C", AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(b, err)
	_, err = js.Publish(ctx, "s", []byte("x"))
	require.NoError(b, err)
	msg, err := cons.Next()
	require.NoError(b, err)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := msg.Metadata(); err != nil {
			b.Fatal(err)
		}
	}
}
