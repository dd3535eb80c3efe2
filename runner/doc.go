// Package runner consumes JetStream consumers with bounded worker pools and
// is the one place that turns a handler's [Delivery] — ack, nak after a
// delay, or terminate with a cause — into JetStream calls, logs and metrics.
package runner
