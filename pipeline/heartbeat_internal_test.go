package pipeline

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// progressMsg counts the InProgress calls a heartbeat makes.
type progressMsg struct {
	jetstream.Msg
	beats atomic.Int32
}

func (m *progressMsg) InProgress() error { m.beats.Add(1); return nil }

// TestHeartbeatBeatsUntilStopped: the heartbeat, held in its run, tells
// JetStream the message is in progress every Heartbeat, and once stop has
// returned it neither beats nor is beating; stopping again is harmless.
func TestHeartbeatBeatsUntilStopped(t *testing.T) {
	t.Parallel()
	p := &Pipeline{cfg: Config{Heartbeat: time.Millisecond}, log: slog.New(slog.DiscardHandler)}
	msg := &progressMsg{}
	r := &run{p: p}
	r.t = &r.txn
	r.t.p, r.t.key = p, "k"
	hb := p.heartbeat(context.Background(), &r.hb, msg, r.t, 1, func() { t.Error("no claim to lose") })
	deadline := time.Now().Add(10 * time.Second)
	for msg.beats.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d beats in 10 s at a 1 ms heartbeat", msg.beats.Load())
		}
		time.Sleep(time.Millisecond)
	}
	hb.stop()
	n := msg.beats.Load()
	time.Sleep(20 * time.Millisecond) // twenty heartbeats: none may come
	if got := msg.beats.Load(); got != n {
		t.Fatalf("%d beats after stop returned", got-n)
	}
	hb.stop()

	// A heartbeat whose context ended does not beat.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	quiet := &progressMsg{}
	hb = p.heartbeat(ctx, new(beat), quiet, r.t, 1, func() {})
	time.Sleep(20 * time.Millisecond)
	hb.stop()
	if quiet.beats.Load() != 0 {
		t.Fatal("beat under an ended context")
	}
}
