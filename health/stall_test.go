package health_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/health"
	"github.com/sagad/sagad/internal/natstest"
)

// clock is a fake clock tests move by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestStalls: a consumer with pending work is stalled once neither this
// process settled one of its messages nor its ack floor moved for
// StallAfter; either kind of progress, or nothing left pending, clears it.
func TestStalls(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}})
	require.NoError(t, err)
	cons, err := js.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "C", AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	for range 3 {
		_, err := js.Publish(ctx, "s", []byte("x"))
		require.NoError(t, err)
	}
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	mon := health.New(health.Config{
		StallAfter: 2 * time.Minute, Now: clk.Now,
		Consumers: []health.Consumer{{Stream: "S", Name: "C", Label: "phase 9 TEST"}},
	})
	t.Cleanup(mon.Stop)

	require.NoError(t, mon.Stalls(ctx, js), "the clock starts at the first look")
	clk.Add(2*time.Minute - time.Second)
	require.NoError(t, mon.Stalls(ctx, js))
	clk.Add(time.Second)
	err = mon.Stalls(ctx, js)
	require.ErrorIs(t, err, health.ErrStalled)
	require.EqualError(t, err, "phase 9 TEST stalled: 3 messages pending, no progress for 2m0s")
	require.ErrorIs(t, mon.Check(ctx, js), health.ErrStalled)

	// This process finished a message: progress.
	mon.Settled("C")
	require.NoError(t, mon.Stalls(ctx, js))
	clk.Add(3 * time.Minute)
	require.ErrorIs(t, mon.Stalls(ctx, js), health.ErrStalled)

	// Another process acknowledged one: the ack floor moved.
	ack := func(n int) {
		t.Helper()
		batch, err := cons.FetchNoWait(n)
		require.NoError(t, err)
		got := 0
		for m := range batch.Messages() {
			require.NoError(t, m.DoubleAck(ctx))
			got++
		}
		require.Equal(t, n, got)
	}
	ack(1)
	require.NoError(t, mon.Stalls(ctx, js))

	// An operator paused the phase: said so.
	_, err = js.PauseConsumer(ctx, "S", "C", time.Now().Add(time.Hour))
	require.NoError(t, err)
	clk.Add(2 * time.Minute)
	require.ErrorContains(t, mon.Stalls(ctx, js), "2 messages pending, no progress for 2m0s (its consumer is paused")
	_, err = js.ResumeConsumer(ctx, "S", "C")
	require.NoError(t, err)

	// Nothing pending: never stalled, however long.
	ack(2)
	clk.Add(time.Hour)
	require.NoError(t, mon.Stalls(ctx, js))

	// A consumer that cannot be read is reported.
	require.NoError(t, js.DeleteConsumer(ctx, "S", "C"))
	require.ErrorContains(t, mon.Stalls(ctx, js), "phase 9 TEST: consumer C: ")
}
