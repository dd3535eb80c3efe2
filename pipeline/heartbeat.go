package pipeline

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/internal/corrupt"
)

// ticksPerBeat is how many of the clock's ticks make one Heartbeat: a beat
// comes between 3/4 of a Heartbeat and a whole one after the last (or the
// attempt's start), never later than a timer of its own would have.
const ticksPerBeat = 4

// clockShards spreads the attempts over this many sets, each with its own
// mutex: every phase worker registers and removes an attempt at each
// delivery, and one mutex for all of them would be contended.
const clockShards = 16

// clock beats the attempts that run long, for the whole pipeline: one
// goroutine ticking at a quarter of Heartbeat instead of a timer armed and
// stopped at every attempt (the runtime's timer heap, for some 22,000
// attempts a second of which nearly none lives to its first beat). An
// attempt registers with the tick it started at; a tick beats each attempt
// due, from a goroutine of its own, so a slow renew delays no other.
type clock struct {
	every time.Duration // Heartbeat
	// ticks counts the ticks since the clock was made; an attempt is due at
	// a count.
	ticks  atomic.Int64
	shard  atomic.Uint32 // the next attempt's set, taken in turn
	shards [clockShards]clockShard

	mu   sync.Mutex // start and stop
	quit chan struct{}
	done chan struct{}
}

// clockShard is one set of attempts that may beat.
type clockShard struct {
	mu    sync.Mutex
	beats []*beat
	_     [32]byte // 64 bytes: a shard's mutex on a cache line of its own
}

func newClock(heartbeat time.Duration) *clock { return &clock{every: heartbeat} }

// start starts ticking, unless the clock ticks already.
func (c *clock) start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.quit != nil {
		return
	}
	c.quit, c.done = make(chan struct{}), make(chan struct{})
	go c.run(c.quit, c.done)
}

// stop stops ticking and returns once the clock's goroutine has ended; a
// beat already started still ends on its own (the attempt's stop waits
// for it). Stopping a stopped clock does nothing.
func (c *clock) stop() {
	c.mu.Lock()
	quit, done := c.quit, c.done
	c.quit, c.done = nil, nil
	c.mu.Unlock()
	if quit != nil {
		close(quit)
		<-done
	}
}

// ticking reports whether the clock was started and not stopped since.
func (c *clock) ticking() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.quit != nil
}

func (c *clock) run(quit <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tk := time.NewTicker(max(c.every/ticksPerBeat, time.Microsecond))
	defer tk.Stop()
	for {
		select {
		case <-quit:
			return
		case <-tk.C:
			now := c.ticks.Add(1)
			for i := range c.shards {
				c.shards[i].beatDue(now)
			}
		}
	}
}

// beatDue starts a beat of every attempt of the set due at tick now.
func (s *clockShard) beatDue(now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.beats {
		if !b.busy && b.due <= now {
			b.busy = true
			b.beating.Add(1)
			go b.beat(b.ctx)
		}
	}
}

// add registers b, due ticksPerBeat ticks from now.
func (c *clock) add(b *beat) {
	s := &c.shards[c.shard.Add(1)%clockShards]
	s.mu.Lock()
	b.c, b.s, b.idx, b.busy = c, s, len(s.beats), false
	b.due = c.ticks.Load() + ticksPerBeat
	s.beats = append(s.beats, b)
	s.mu.Unlock()
}

// remove takes b out of its set (if it is in it): no beat starts after.
func (s *clockShard) remove(b *beat) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := b.idx
	if i < 0 || i >= len(s.beats) || s.beats[i] != b {
		return
	}
	last := len(s.beats) - 1
	s.beats[i] = s.beats[last]
	s.beats[i].idx = i
	s.beats[last] = nil // the attempt is garbage once it ends
	s.beats = s.beats[:last]
	b.idx = -1
}

// heartbeat tells JetStream the message is in progress and renews this
// delivery's claim every Heartbeat until its stop is called. A lost claim
// calls lost. Most phases end long before the first beat, so an attempt
// only registers with the pipeline's clock (see clock), in one value held
// in the attempt's run (b, zero until now), which holds ctx for the beats
// the clock starts: a closure of b and ctx was an allocation an attempt.
func (p *Pipeline) heartbeat(ctx context.Context, b *beat, msg jetstream.Msg, t *txn, cycle int, lost func()) *beat {
	b.p, b.ctx, b.msg, b.t, b.cycle, b.lost = p, ctx, msg, t, cycle, lost
	p.clock.add(b)
	return b
}

// beat is one attempt's heartbeat (see heartbeat).
type beat struct {
	p     *Pipeline
	ctx   context.Context // the attempt's, each beat's
	msg   jetstream.Msg
	t     *txn
	cycle int
	lost  func()

	// c and s are the clock and the set b is registered in; idx, due and
	// busy (a beat in flight, or the heartbeat ended by its context or a
	// lost claim) are s's, under its mutex.
	c       *clock
	s       *clockShard
	idx     int
	due     int64
	busy    bool
	beating sync.WaitGroup
}

// beat renews the message and the claim once, and makes the next beat due
// a Heartbeat from now. A heartbeat whose context ended, or whose claim is
// lost, stays busy: it beats no more.
func (b *beat) beat(ctx context.Context) {
	defer b.beating.Done()
	if ctx.Err() != nil {
		return
	}
	p, t := b.p, b.t
	_ = b.msg.InProgress()
	if err := t.renew(ctx, b.cycle); errors.Is(err, errClaimLost) {
		p.log.Warn("claim lost: stopping the phase", "key", t.key, "cycle", b.cycle)
		b.lost()
		return
	} else if errors.Is(err, corrupt.ErrCorrupt) {
		// The checkpoint was replaced by a value sagad did not
		// write: no claim is left to keep (the capsule halts).
		b.lost()
		return
	} else if err != nil {
		p.log.Warn("renew claim", "key", t.key, "error", err)
	}
	b.s.mu.Lock()
	b.due = b.c.ticks.Load() + ticksPerBeat
	b.busy = false
	b.s.mu.Unlock()
}

// stop ends the heartbeat and returns once no beat is in flight (one may
// still write the claim). Calling it again does nothing more.
func (b *beat) stop() {
	if b.s == nil {
		return
	}
	b.s.remove(b)
	// Once b is out of its set no beat adds to beating, so waiting again
	// is waiting for nothing.
	b.beating.Wait()
}
