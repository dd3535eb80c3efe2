package pipeline_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
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
	f := setupWith(t, func(c *pipeline.Config) { c.Metrics = m })
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
	s := f.wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State, "a valid capsule behind the flood completes")

	terminated := func(cause string) float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != "sagad_messages_terminated_total" {
				continue
			}
			for _, s := range mf.GetMetric() {
				for _, l := range s.GetLabel() {
					if l.GetName() == "cause" && l.GetValue() == cause {
						return s.GetCounter().GetValue()
					}
				}
			}
		}
		return 0
	}
	natstest.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool {
		return terminated(metrics.TermInvalidKey)+terminated(metrics.TermNoKey)+terminated(metrics.TermBadHeader)+terminated(metrics.TermUnknownCapsule) == flood
	})
	require.Equal(t, float64(flood/4), terminated(metrics.TermInvalidKey))
	require.Equal(t, float64(flood/4), terminated(metrics.TermNoKey))
	require.Equal(t, float64(flood/4), terminated(metrics.TermBadHeader))
	require.Equal(t, float64(flood/4), terminated(metrics.TermUnknownCapsule))

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
