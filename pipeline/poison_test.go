package pipeline_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// TestPoisonFloodDoesNotStallAPhase floods PLANNING with 1,100 messages that
// can never succeed — keys that are no KV key, a missing key, a cycle that
// is no number, and capsules sagad never received with a body that is no
// capsule (a phase never decodes a message's body; the stream's leader
// confirms it knows no such capsule) — and requires that each is terminated
// at once, never redelivered, counted by cause, and that a valid capsule
// published behind the flood completes.
func TestPoisonFloodDoesNotStallAPhase(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.BuildInfo{})
	f := setupWith(t, func(c *pipeline.Config) {
		c.Metrics = m
		// 1,100 terminations are 1,100 ERROR lines: counted here, not
		// written through t.Log, which would make the test measure logging.
		c.Logger = slog.New(slog.DiscardHandler)
	})
	nc := f.js.Conn()

	poison := func(i int) *nats.Msg {
		msg := nats.NewMsg(store.PhaseSubject(capsule.Planning))
		msg.Data = []byte(`{}`)
		switch i % 4 {
		case 0: // keys that are no KV key
			msg.Header.Set(store.HeaderKey, []string{"*", ">", "../x", "a b"}[i/4%4])
			msg.Header.Set(store.HeaderCycle, "0")
		case 1: // no key at all
			msg.Header.Set(store.HeaderCycle, "0")
		case 2: // a cycle that is no number
			msg.Header.Set(store.HeaderKey, "k"+strconv.Itoa(i))
			msg.Header.Set(store.HeaderCycle, "one")
		case 3: // a capsule sagad never received, and a body that is no capsule
			msg.Header.Set(store.HeaderKey, "k"+strconv.Itoa(i))
			msg.Header.Set(store.HeaderCycle, "0")
			msg.Data = []byte("\x00not json")
		}
		return msg
	}
	ctx := context.Background()
	const flood = 1100
	for i := range flood {
		_, err := f.js.PublishMsgAsync(poison(i))
		require.NoError(t, err)
	}
	select {
	case <-f.js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("flood not acknowledged")
	}
	require.NoError(t, nc.Flush())

	doc := f.own(t, capsuletest.New())
	f.publish(t, doc.Sealed(t))
	// Behind the flood in PLANNING's queue: allow for a busy machine (the
	// race detector, parallel tests) rather than a fixed pace.
	var s client.Status
	natstest.Eventually(t, 90*time.Second, 20*time.Millisecond, func() bool {
		var err error
		s, err = f.client.Status(ctx, doc.ID())
		return err == nil && s.State != capsule.InProgress
	}, "the valid capsule behind the flood never ended")
	require.Equal(t, capsule.Completed, s.State, "a valid capsule behind the flood completes")

	natstest.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool {
		return terminated(t, reg, metrics.TermInvalidKey)+terminated(t, reg, metrics.TermNoKey)+terminated(t, reg, metrics.TermBadHeader)+terminated(t, reg, metrics.TermUnknownCapsule) == flood
	})
	require.Equal(t, float64(flood/4), terminated(t, reg, metrics.TermInvalidKey))
	require.Equal(t, float64(flood/4), terminated(t, reg, metrics.TermNoKey))
	require.Equal(t, float64(flood/4), terminated(t, reg, metrics.TermBadHeader))
	require.Equal(t, float64(flood/4), terminated(t, reg, metrics.TermUnknownCapsule))

	cons, err := f.js.Consumer(ctx, store.PhaseStream(capsule.Planning), store.ConsumerName(capsule.Planning))
	require.NoError(t, err)
	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.NumRedelivered, "a poison message is never redelivered")
}
