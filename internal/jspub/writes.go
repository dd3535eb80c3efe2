package jspub

import (
	"context"
	"time"
)

// WriteCtx returns ctx bounded by d, unless ctx's own deadline comes first
// (nats.go's habit: a default only when the caller set nothing shorter).
// d <= 0 means [DefaultTimeout]. A write gets its own short deadline this
// way instead of inheriting a phase's ten minutes: a write the server
// cannot take (disk full, no quorum) fails in seconds, as a transient
// failure the handler naks, rather than holding its message for the whole
// phase timeout.
func WriteCtx(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		d = DefaultTimeout
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// Writes is the policy of one process's JetStream writes: the deadline of
// each write and who is told how it ended. Every write sagad makes
// (publishes, KV and object store writes) goes through [Writes.Do]. A nil
// *Writes bounds writes by [DefaultTimeout] and tells no one.
type Writes struct {
	// Timeout bounds one write (see [WriteCtx]). Defaults to DefaultTimeout.
	Timeout time.Duration
	// Observe, when set, is told the result of every write whose caller's
	// context was still live when it ended: nil for success, or the error,
	// a refusal of the request (a lost compare-and-set) included — the
	// observer decides what counts as JetStream failing (package health).
	// It must be quick and safe for concurrent use.
	Observe func(err error)
}

// Do runs write with a context bounded by the write timeout and reports its
// result to Observe. A write cut short by its caller's context (shutdown, a
// phase's own timeout) is not reported: it says nothing about JetStream.
func (w *Writes) Do(ctx context.Context, write func(ctx context.Context) error) error {
	var d time.Duration
	if w != nil {
		d = w.Timeout
	}
	wctx, cancel := WriteCtx(ctx, d)
	err := write(wctx)
	cancel()
	if w != nil && w.Observe != nil && ctx.Err() == nil {
		w.Observe(err)
	}
	return err
}

// Write is [Writes.Do] for a write that returns a value (a sequence, a
// revision).
func Write[T any](ctx context.Context, w *Writes, write func(ctx context.Context) (T, error)) (T, error) {
	var v T
	err := w.Do(ctx, func(ctx context.Context) error {
		var err error
		v, err = write(ctx)
		return err
	})
	return v, err
}

// ReadCtx bounds one read the way w bounds one write (its timeout, else
// DefaultTimeout): a request in flight when its server dies gets no answer,
// and nats.go does not fail it on reconnect, so a read without a deadline of
// its own would hold its caller — and its message — for as long as the
// caller's context lasts.
func ReadCtx(ctx context.Context, w *Writes) (context.Context, context.CancelFunc) {
	d := DefaultTimeout
	if w != nil && w.Timeout > 0 {
		d = w.Timeout
	}
	return WriteCtx(ctx, d)
}
