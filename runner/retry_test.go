package runner_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/runner"
)

// TestRetryWaitsTheConsumersRetryDelay: a handler's Retry, and a NakAfter
// without a delay, are redelivered after the consumer's RetryDelay; a
// NakAfter with a delay after that delay. The delay is read from the nak's
// log line, and the redelivery counted.
func TestRetryWaitsTheConsumersRetryDelay(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}})
	require.NoError(t, err)
	_, err = js.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "C", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: -1})
	require.NoError(t, err)
	logs := &syncBuffer{}
	var calls atomic.Int32
	c, err := runner.Start(ctx, ctx, js, "S", "C", runner.Config{
		RetryDelay: 30 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil)),
	}, func(ctx context.Context, msg jetstream.Msg) runner.Delivery {
		switch calls.Add(1) {
		case 1:
			return runner.Retry(errors.New("first"))
		case 2:
			return runner.NakAfter(0, errors.New("second"))
		case 3:
			return runner.NakAfter(70*time.Millisecond, errors.New("third"))
		}
		return runner.Ack()
	})
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	_, err = js.Publish(ctx, "s", []byte("x"))
	require.NoError(t, err)
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { return calls.Load() == 4 }, "never acknowledged")
	var delays []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if _, after, ok := strings.Cut(l, "retry_in="); ok {
			delays = append(delays, strings.Fields(after)[0])
		}
	}
	require.Equal(t, []string{"30ms", "30ms", "70ms"}, delays)
}
