package runner

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/store"
)

// Handler decides what happens to one message. It must be safe to run again
// for the same message (a redelivery) and must not ack, nak or terminate the
// message itself: the [Consumer] does, from the returned [Delivery]. Nothing
// may keep msg once the handler returned: the value serves the worker's next
// message.
type Handler func(ctx context.Context, msg jetstream.Msg) Delivery

// Config configures a [Consumer].
type Config struct {
	// Workers is how many messages are handled at once. Defaults to 1.
	Workers int
	// Logger receives naks and terminations. Defaults to discarding.
	Logger *slog.Logger
	// Metrics counts terminations and redeliveries found in flight. Nil
	// counts nothing.
	Metrics *metrics.Metrics
	// RetryDelay is how long a message waits before it comes back when its
	// handler retries it without a delay of its own ([Retry], or
	// [NakAfter] with no delay). Defaults to 1s.
	RetryDelay time.Duration
	// BusyDelay is how long a redelivered message whose first delivery is
	// still being handled in this process waits before it comes back (it
	// is naked, not handled a second time). Defaults to 1s.
	BusyDelay time.Duration
	// Progress, when set, is told the consumer's name whenever a handler
	// finished a message: acknowledged or terminated it (package health
	// watches for stalls with it).
	Progress func(consumer string)
}

// Consumer consumes one durable JetStream consumer with a bounded pool of
// workers and settles every message by the [Delivery] its handler returns.
type Consumer struct {
	name    string
	log     *slog.Logger
	metrics *metrics.Metrics
	cfg     Config
	cc      jetstream.ConsumeContext
	work    chan taken
	wg      sync.WaitGroup

	// inFlight holds the stream sequences of the messages this Consumer
	// took and has not settled yet (waiting for a worker or being handled),
	// each with whether a redelivery of it was logged already.
	mu       sync.Mutex
	inFlight map[uint64]bool
}

// Start begins consuming the durable consumer name of stream. Handlers run
// with workCtx, which outlives ctx on purpose: [Consumer.Stop] drains them.
func Start(ctx, workCtx context.Context, js jetstream.JetStream, stream, name string, cfg Config, handle Handler) (*Consumer, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.RetryDelay <= 0 {
		cfg.RetryDelay = time.Second
	}
	if cfg.BusyDelay <= 0 {
		cfg.BusyDelay = time.Second
	}
	cons, err := js.Consumer(ctx, stream, name)
	if err != nil {
		return nil, err
	}
	c := &Consumer{name: name, log: cfg.Logger, metrics: cfg.Metrics, cfg: cfg, work: make(chan taken),
		inFlight: make(map[uint64]bool)}
	for i := 0; i < cfg.Workers; i++ {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			// A worker's own child of workCtx: the contexts its handlers
			// make (a deadline per read) register with it rather than
			// all with workCtx, under one lock.
			ctx, cancel := context.WithCancel(workCtx)
			defer cancel()
			// One taken per worker, each message's in turn: the handler
			// is done with it when it returns (Handler), and a taken of
			// its own was an allocation a message.
			msg := new(taken)
			for *msg = range c.work {
				// The handler gets the message with the metadata take
				// read: parsing its reply subject again cost every
				// handler that asks for it.
				c.settle(msg.Msg, handle(ctx, msg))
				c.done(msg)
				*msg = taken{}
			}
		}()
	}
	c.cc, err = cons.Consume(func(msg jetstream.Msg) {
		tk, ok := c.take(msg)
		if !ok {
			return
		}
		c.work <- tk
	},
		jetstream.PullMaxMessages(cfg.Workers),
		jetstream.PullExpiry(pullExpiry),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				c.log.Warn("consume", "consumer", name, "error", err)
			}
		}))
	if err != nil {
		close(c.work)
		c.wg.Wait()
		return nil, err
	}
	return c, nil
}

// pullExpiry is how long the server holds one pull request; the client
// expects an idle heartbeat every half of it and pulls again after two
// missed ones. When the node leading a consumer goes away the client is told
// "server shutdown", and its next pull may find no leader yet ("no
// responders"); unless a "leadership change" follows, only the missed
// heartbeats make it pull again: with the default 30 s expiry a phase stood
// still for 28–30 s after a node of the cluster was lost (pipeline's
// TestClusterR3SurvivesNodeLoss). 5 s brings that to about 5 s, at the cost
// of one pull request per consumer every 5 s when idle.
const pullExpiry = 5 * time.Second

// drainGrace bounds how long Stop waits for a drain. A pull request the
// server holds (an idle or just-resumed consumer) only ends at its expiry;
// after the grace the consumer is stopped, and messages it had buffered are
// redelivered after AckWait.
const drainGrace = 2 * time.Second

// Stop stops fetching and returns once every handler in flight returned.
func (c *Consumer) Stop() {
	c.cc.Drain()
	select {
	case <-c.cc.Closed():
	case <-time.After(drainGrace):
		c.cc.Stop()
		<-c.cc.Closed()
	}
	close(c.work)
	c.wg.Wait()
}

// take records msg as in flight, unless its stream sequence is in flight
// already: a redelivery (AckWait ran out) of a message whose first delivery
// is still waiting for a worker or being handled, say stuck on a write. A
// second handler would only race the first; the copy is naked to come back
// after BusyDelay (the first's acknowledgement, meanwhile, settles both) and
// counted.
func (c *Consumer) take(msg jetstream.Msg) (taken, bool) {
	md, err := msg.Metadata()
	if err != nil {
		return taken{Msg: msg, mdErr: err}, true // no sequence to know it by
	}
	seq := md.Sequence.Stream
	c.mu.Lock()
	logged, busy := c.inFlight[seq]
	c.inFlight[seq] = busy // logged once per message: it comes back every BusyDelay
	c.mu.Unlock()
	if !busy {
		return taken{Msg: msg, md: md, known: true}, true
	}
	c.metrics.RedeliveredInFlight()
	if !logged {
		c.log.Warn("redelivered while its first delivery is still being handled: handed back", "consumer", c.name,
			"subject", msg.Subject(), "key", store.PrintableKey(msg.Headers().Get(store.HeaderKey)), "stream_seq", seq,
			"deliveries", md.NumDelivered, "retry_in", c.cfg.BusyDelay)
	}
	_ = msg.NakWithDelay(c.cfg.BusyDelay)
	return taken{}, false
}

// taken is a message handed to a worker with the metadata take read from
// it (known: it has a stream sequence), so neither done nor the handler
// parses it again. A taken is the handler's message: its Metadata answers
// what the message's own answered to take.
type taken struct {
	jetstream.Msg
	md    *jetstream.MsgMetadata
	mdErr error
	known bool
}

// Metadata is the message's metadata as take read it. Handlers only read
// it; each handler has its own message.
func (t *taken) Metadata() (*jetstream.MsgMetadata, error) { return t.md, t.mdErr }

// done forgets msg as in flight once it is settled.
func (c *Consumer) done(msg *taken) {
	if !msg.known {
		return
	}
	c.mu.Lock()
	delete(c.inFlight, msg.md.Sequence.Stream)
	c.mu.Unlock()
}
