package pipeline

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// delivery is what a handler decided for its message: done (ack), try again
// after a delay (nak), or never (terminate, for a message that can never
// succeed). Handlers only decide; [Pipeline.settle] is the one place that
// turns the decision into JetStream calls, logs and counts it.
type delivery struct {
	kind  deliveryKind
	delay time.Duration
	// cause is a termination's reason, one of metrics.TermReasons.
	cause string
	// err explains a nak or a termination.
	err error
}

type deliveryKind int

const (
	deliverAck deliveryKind = iota
	deliverNak
	deliverTerm
)

// ack: the message's work is done (or was done before).
func ack() delivery { return delivery{kind: deliverAck} }

// nakAfter: a transient failure; redeliver after delay.
func nakAfter(delay time.Duration, err error) delivery {
	return delivery{kind: deliverNak, delay: delay, err: err}
}

// term: the message can never succeed; it is not redelivered.
func term(cause string, err error) delivery {
	return delivery{kind: deliverTerm, cause: cause, err: err}
}

// settle carries out d for msg. A nak is logged at WARN with its error (a
// transient failure that will be retried), a termination once at ERROR and
// counted by cause; the acknowledgement itself is best effort: a lost ack
// means a redelivery, which every handler makes harmless.
func (p *Pipeline) settle(msg jetstream.Msg, consumer string, d delivery) {
	switch d.kind {
	case deliverNak:
		if d.err != nil {
			p.log.Warn("message will be retried", "consumer", consumer, "subject", msg.Subject(),
				"key", msg.Headers().Get(HeaderKey), "retry_in", d.delay, "error", d.err)
		}
		_ = msg.NakWithDelay(d.delay)
	case deliverTerm:
		p.log.Error("message terminated: it can never succeed", "consumer", consumer, "subject", msg.Subject(),
			"key", printableKey(msg.Headers().Get(HeaderKey)), "cause", d.cause, "error", d.err)
		p.metrics.Terminated(d.cause)
		_ = msg.TermWithReason(d.cause)
	default:
		_ = msg.Ack()
	}
}

// printableKey keeps a hostile header out of the log as it came.
func printableKey(k string) string {
	if len(k) > 128 {
		k = k[:128] + "…"
	}
	return k
}
