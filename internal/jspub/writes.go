package jspub

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/internal/cas"
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
	// Target names the stream or bucket these writes go to, for Observe.
	// Defaults to the bucket of a KV or object store subject published to
	// ([TargetOf]), else "jetstream".
	Target string
	// Observe, when set, is told the target and result of every write whose
	// caller's context was still live when it ended: nil for success, or
	// the error, a refusal of the request (a lost compare-and-set) included
	// — the observer decides what counts as JetStream failing (package
	// health). A target is told apart because a stream can refuse writes
	// (its store limit, its own write error) while others take theirs. It
	// must be quick and safe for concurrent use.
	Observe func(target string, err error)
}

// On returns a copy of w whose writes go to target (see [Writes.Target]);
// nil for a nil w. Make it once per target, not per write.
func (w *Writes) On(target string) *Writes {
	if w == nil {
		return nil
	}
	c := *w
	c.Target = target
	return &c
}

// TargetOf names what a write to subject goes to: the bucket of a KV
// ("$KV.<bucket>.…") or object store ("$O.<bucket>.…") subject, else "".
func TargetOf(subject string) string {
	for _, p := range [...]string{"$KV.", "$O."} {
		if rest, ok := strings.CutPrefix(subject, p); ok {
			if i := strings.IndexByte(rest, '.'); i > 0 {
				return rest[:i]
			}
		}
	}
	return ""
}

// target is what a write to subject ("" for none known) reports to Observe.
func (w *Writes) target(subject string) string {
	if w.Target != "" {
		return w.Target
	}
	if t := TargetOf(subject); t != "" {
		return t
	}
	return "jetstream"
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
		w.Observe(w.target(""), err)
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

// Publish is [Write] of [Publish]: m published on nc under w's deadline,
// reported to Observe. It is the hot path's write (every checkpoint
// compare-and-set, phase message, lock and artifact write), so it makes no
// context of its own: the deadline is a pooled timer of the request
// (nats.Conn.RequestMsg), the earlier of now plus the write timeout and
// ctx's own deadline. A context per write (WithTimeout: a timer, four
// allocations and a child registered with the phase's context) was about
// one per cent of sagad's CPU. What it gives up: a write already sent is
// not abandoned when ctx is cancelled without a deadline (shutdown, a lost
// claim) — it ends within the write timeout, or at once when the
// connection closes; a write not yet sent is not sent.
func (w *Writes) Publish(ctx context.Context, nc *nats.Conn, m *nats.Msg) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("publish %s: %w", m.Subject, err)
	}
	d := DefaultTimeout
	if w != nil && w.Timeout > 0 {
		d = w.Timeout
	}
	// The time left, with no clock read unless ctx has a deadline: a read
	// of this machine's clock is tens of nanoseconds, at every write.
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	seq, err := publishWithin(ctx, nc, m, d)
	if w != nil && w.Observe != nil && ctx.Err() == nil {
		w.Observe(w.target(m.Subject), err)
	}
	return seq, err
}

// KVCreate is [KVCreate] through [Writes.Publish]: a key never written
// (RECEPTION's kept bytes, once per capsule) takes one request and no
// context of its own; only a key over a delete or purge marker takes the
// KV client's Create, under [Writes.Do].
func (w *Writes) KVCreate(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, key string, value []byte) (uint64, error) {
	rev, err := w.KVUpdate(ctx, nc, kv, key, value, 0)
	if err == nil || !cas.Conflict(err) {
		return rev, err
	}
	if w != nil && w.Target == "" {
		w = w.On(kv.Bucket()) // reported as the publish above was
	}
	return Write(ctx, w, func(ctx context.Context) (uint64, error) { return kv.Create(ctx, key, value) })
}

// KVUpdate is [KVUpdate] through [Writes.Publish], in a pooled message
// ([Msg]): every lock taken and RECEPTION's kept bytes ([Writes.KVCreate])
// are one, and a message of its own cost four allocations more (the
// message, the header map, its group, the values' array).
func (w *Writes) KVUpdate(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, key string, value []byte, last uint64) (uint64, error) {
	p := GetMsg(kvSubject(kv, key), value)
	kvUpdateHeaders(p.Headers(), last)
	rev, err := w.Publish(ctx, nc, p.Msg())
	p.Release()
	return rev, err
}

// KVPurge is [KVPurge] through [Writes.Publish], in a pooled message.
func (w *Writes) KVPurge(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, key string, rev uint64, ttl time.Duration) (uint64, error) {
	p := GetMsg(kvSubject(kv, key), nil)
	kvPurgeHeaders(p.Headers(), rev, ttl)
	seq, err := w.Publish(ctx, nc, p.Msg())
	p.Release()
	return seq, err
}

// publishWithin is [Publish] with the time left instead of a context's
// deadline; a request that times out fails with context.DeadlineExceeded,
// as it would under a context's deadline. The deadline is only fixed at a
// first retry (a stream with no responder answers at once, so the time
// its answer took is not counted): most writes need none.
func publishWithin(ctx context.Context, nc *nats.Conn, m *nats.Msg, left time.Duration) (uint64, error) {
	var resp *nats.Msg
	var err error
	var deadline time.Time
	for attempt := 1; ; attempt++ {
		if left <= 0 {
			return 0, fmt.Errorf("publish %s: %w", m.Subject, context.DeadlineExceeded)
		}
		resp, err = nc.RequestMsg(m, left)
		if !errors.Is(err, nats.ErrNoResponders) || attempt == noRespondersRetries {
			break
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(left)
		}
		t := time.NewTimer(min(noRespondersDelay, time.Until(deadline)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0, fmt.Errorf("publish %s: %w", m.Subject, ctx.Err())
		}
		left = time.Until(deadline)
	}
	if errors.Is(err, nats.ErrTimeout) {
		return 0, fmt.Errorf("publish %s: %w (%w)", m.Subject, context.DeadlineExceeded, err)
	}
	if err != nil {
		return 0, fmt.Errorf("publish %s: %w", m.Subject, err)
	}
	seq, err := ParseAck(resp.Data)
	if err != nil {
		return 0, fmt.Errorf("publish %s: %w", m.Subject, err)
	}
	return seq, nil
}
