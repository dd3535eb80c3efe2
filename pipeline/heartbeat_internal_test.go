package pipeline

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/natstest"
)

// progressMsg counts the InProgress calls a heartbeat makes; with hold set,
// each call waits until hold is closed.
type progressMsg struct {
	jetstream.Msg
	beats atomic.Int32
	first atomic.Int64 // when the first beat came, Unix nanoseconds
	hold  chan struct{}
}

func (m *progressMsg) InProgress() error {
	m.first.CompareAndSwap(0, time.Now().UnixNano())
	m.beats.Add(1)
	if m.hold != nil {
		<-m.hold
	}
	return nil
}

// clockedPipeline is a pipeline with only what a heartbeat uses, its clock
// ticking until the test ends.
func clockedPipeline(t *testing.T, heartbeat time.Duration) *Pipeline {
	p := &Pipeline{cfg: Config{Heartbeat: heartbeat}, log: slog.New(slog.DiscardHandler), clock: newClock(heartbeat)}
	p.clock.start()
	t.Cleanup(p.clock.stop)
	return p
}

func testTxn(p *Pipeline) *txn { return &txn{p: p, key: "k"} }

// waitBeats waits until msg has beaten n times.
func waitBeats(t *testing.T, msg *progressMsg, n int32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for msg.beats.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d beats in 10 s, want %d", msg.beats.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHeartbeatBeatsUntilStopped: the heartbeat, held in its run, tells
// JetStream the message is in progress every Heartbeat, and once stop has
// returned it neither beats nor is beating; stopping again is harmless.
func TestHeartbeatBeatsUntilStopped(t *testing.T) {
	t.Parallel()
	p := clockedPipeline(t, time.Millisecond)
	msg := &progressMsg{}
	r := &run{p: p}
	r.t = &r.txn
	r.t.p, r.t.key = p, "k"
	hb := p.heartbeat(context.Background(), &r.hb, msg, r.t, 1, func() { t.Error("no claim to lose") })
	waitBeats(t, msg, 3)
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

// TestHeartbeatNotBeforeItsTime: an attempt that ends within a quarter of
// a Heartbeat never beats, and the first beat of one that runs on comes
// about a Heartbeat after its start (between three and four of the
// clock's ticks, a quarter of it each; the bound below leaves room for
// the ticker's jitter on a busy machine).
func TestHeartbeatNotBeforeItsTime(t *testing.T) {
	t.Parallel()
	const every = 200 * time.Millisecond
	p := clockedPipeline(t, every)
	short := &progressMsg{}
	start := time.Now()
	hb := p.heartbeat(context.Background(), new(beat), short, testTxn(p), 1, func() {})
	time.Sleep(every / 4)
	hb.stop()
	if short.beats.Load() != 0 {
		t.Fatalf("a beat within %s of the start, heartbeat %s", time.Since(start), every)
	}
	long := &progressMsg{}
	start = time.Now()
	hb = p.heartbeat(context.Background(), new(beat), long, testTxn(p), 1, func() {})
	defer hb.stop()
	waitBeats(t, long, 1)
	if took := time.Unix(0, long.first.Load()).Sub(start); took < every/2 {
		t.Fatalf("first beat after %s, heartbeat %s", took, every)
	}
}

// TestHeartbeatSlowBeatDelaysNoOther: an attempt whose beat hangs (a renew
// stuck on the server) keeps the others beating, beats no second time
// while its first is in flight, and its stop waits for that beat.
func TestHeartbeatSlowBeatDelaysNoOther(t *testing.T) {
	t.Parallel()
	p := clockedPipeline(t, time.Millisecond)
	stuck := &progressMsg{hold: make(chan struct{})}
	slow := p.heartbeat(context.Background(), new(beat), stuck, testTxn(p), 1, func() {})
	waitBeats(t, stuck, 1)
	others := make([]*progressMsg, 40)
	hbs := make([]*beat, len(others))
	for i := range others {
		others[i] = &progressMsg{}
		hbs[i] = p.heartbeat(context.Background(), new(beat), others[i], testTxn(p), 1, func() {})
	}
	for _, m := range others {
		waitBeats(t, m, 3)
	}
	for _, hb := range hbs {
		hb.stop()
	}
	if n := stuck.beats.Load(); n != 1 {
		t.Fatalf("%d beats of a heartbeat whose first never ended", n)
	}
	stopped := make(chan struct{})
	go func() { slow.stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("stop returned with a beat in flight")
	case <-time.After(20 * time.Millisecond):
	}
	close(stuck.hold)
	<-stopped
}

// TestHeartbeatsComeAndGo: attempts registering and stopping from many
// goroutines at once, as the phase workers do, each beating while it runs
// long enough and never after its stop.
func TestHeartbeatsComeAndGo(t *testing.T) {
	t.Parallel()
	p := clockedPipeline(t, time.Millisecond)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				m := &progressMsg{}
				hb := p.heartbeat(context.Background(), new(beat), m, testTxn(p), 1, func() {})
				if (w+i)%50 == 0 {
					waitBeats(t, m, 2)
				}
				hb.stop()
				n := m.beats.Load()
				time.Sleep(time.Microsecond)
				if m.beats.Load() != n {
					t.Error("a beat after stop returned")
				}
			}
		}()
	}
	wg.Wait()
	for i := range p.clock.shards {
		s := &p.clock.shards[i]
		s.mu.Lock()
		n := len(s.beats)
		s.mu.Unlock()
		if n != 0 {
			t.Fatalf("%d attempts left registered after every stop", n)
		}
	}
}

// TestClockStopLeavesNoGoroutine: the clock's goroutine ends with stop,
// stopping twice is harmless, and a stopped clock starts again. Not
// parallel: goleak looks at the whole process.
func TestClockStopLeavesNoGoroutine(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := newClock(time.Millisecond)
	c.start()
	c.start()
	c.stop()
	c.stop()
	c.start()
	p := &Pipeline{cfg: Config{Heartbeat: time.Millisecond}, log: slog.New(slog.DiscardHandler), clock: c}
	m := &progressMsg{}
	hb := p.heartbeat(context.Background(), new(beat), m, testTxn(p), 1, func() {})
	waitBeats(t, m, 1)
	hb.stop()
	c.stop()
}

// TestPipelineStopStopsItsClock: the clock ticks from Start to Stop, and
// again after a second Start.
func TestPipelineStopStopsItsClock(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv)
	ctx := context.Background()
	p, err := New(ctx, js, Config{Workspace: t.TempDir(), Logger: slog.New(slog.DiscardHandler), Heartbeat: 300 * time.Millisecond, AckWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if !p.clock.ticking() {
			t.Fatal("the clock does not tick after Start")
		}
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		p.Stop(stopCtx)
		cancel()
		if p.clock.ticking() {
			t.Fatal("the clock still ticks after Stop")
		}
	}
}

// TestHeartbeatLostClaimStopsThePhase: a beat whose renew finds the claim
// gone (the checkpoint holds no claim of this delivery's: cancelled, or
// taken over) calls lost once, and beats no more.
func TestHeartbeatLostClaimStopsThePhase(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv)
	ctx := context.Background()
	p, err := New(ctx, js, Config{Workspace: t.TempDir(), Logger: slog.New(slog.DiscardHandler), Heartbeat: 20 * time.Millisecond, AckWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p.clock.start()
	t.Cleanup(p.clock.stop)
	tx := testTxn(p)
	tx.token = "sagad-1/run"
	tx.cp = &capsule.Checkpoint{Key: "k", State: capsule.CheckpointState{Status: capsule.InProgress, Phase: capsule.Execution, Cycle: 1}}
	tx.claimed.Store(true)
	msg := &progressMsg{}
	var lost atomic.Int32
	hb := p.heartbeat(ctx, new(beat), msg, tx, 1, func() { lost.Add(1) })
	natstest.Eventually(t, 10*time.Second, time.Millisecond, func() bool { return lost.Load() > 0 })
	time.Sleep(100 * time.Millisecond) // five heartbeats: none may come
	hb.stop()
	if n, beats := lost.Load(), msg.beats.Load(); n != 1 || beats != 1 {
		t.Fatalf("lost called %d times after %d beats, want once after one", n, beats)
	}
}
