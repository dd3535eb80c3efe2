package runner

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/store"
)

// Delivery is what a handler decided for its message: done (ack), try again
// after a delay (nak), or never (terminate, for a message that can never
// succeed). Handlers only decide; [Consumer] settles the decision — the one
// place that turns it into JetStream calls, logs and counts it.
type Delivery struct {
	kind  deliveryKind
	delay time.Duration
	// cause is a termination's reason, one of metrics.TermReasons.
	cause string
	// Err explains a nak or a termination.
	Err error
}

type deliveryKind int

const (
	deliverAck deliveryKind = iota
	deliverNak
	deliverTerm
)

// Ack: the message's work is done (or was done before).
func Ack() Delivery { return Delivery{kind: deliverAck} }

// NakAfter: a transient failure; redeliver after delay, or after the
// consumer's RetryDelay when delay is not positive.
func NakAfter(delay time.Duration, err error) Delivery {
	return Delivery{kind: deliverNak, delay: delay, Err: err}
}

// Retry: a transient failure; redeliver after the consumer's RetryDelay.
func Retry(err error) Delivery { return Delivery{kind: deliverNak, Err: err} }

// Term: the message can never succeed; it is not redelivered. cause is one
// of metrics.TermReasons.
func Term(cause string, err error) Delivery {
	return Delivery{kind: deliverTerm, cause: cause, Err: err}
}

// Retried reports whether d naks its message, and after what delay (0:
// the consumer's RetryDelay).
func (d Delivery) Retried() (delay time.Duration, ok bool) { return d.delay, d.kind == deliverNak }

// Terminated reports whether d terminates its message, and why.
func (d Delivery) Terminated() (cause string, ok bool) { return d.cause, d.kind == deliverTerm }

// settle carries out d for msg. A nak is logged at WARN with its error (a
// transient failure that will be retried), a termination once at ERROR and
// counted by cause; the acknowledgement itself is best effort: a lost ack
// means a redelivery, which every handler makes harmless.
func (c *Consumer) settle(msg jetstream.Msg, d Delivery) {
	switch d.kind {
	case deliverNak:
		if d.delay <= 0 {
			d.delay = c.cfg.RetryDelay
		}
		if d.Err != nil {
			c.log.Warn("message will be retried", "consumer", c.name, "subject", msg.Subject(),
				"key", store.PrintableKey(msg.Headers().Get(store.HeaderKey)), "retry_in", d.delay, "error", d.Err)
		}
		_ = msg.NakWithDelay(d.delay)
	case deliverTerm:
		c.log.Error("message terminated: it can never succeed", "consumer", c.name, "subject", msg.Subject(),
			"key", store.PrintableKey(msg.Headers().Get(store.HeaderKey)), "cause", d.cause, "error", d.Err)
		c.metrics.Terminated(d.cause)
		_ = msg.TermWithReason(d.cause)
		c.progressed()
	default:
		_ = msg.Ack()
		c.progressed()
	}
}

func (c *Consumer) progressed() {
	if c.cfg.Progress != nil {
		c.cfg.Progress(c.name)
	}
}
