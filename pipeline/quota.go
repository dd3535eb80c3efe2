package pipeline

import (
	"sync"
	"time"
)

// IntakeRate is the rate at which one sagad receives a producer's
// capsules: a producer over it has its intake messages delayed (nak with
// delay; never dropped), so one producer's flood turns into waiting
// intake (bounded by store.IntakeQuota) rather than kept bytes,
// checkpoints and agent calls. sagad's own intake (no producer) is not
// limited. The rate is per sagad: N sagads receive N times as much.
type IntakeRate struct {
	// Msgs is capsules per second per producer; negative: unlimited.
	// Defaults to [DefaultIntakeRateMsgs].
	Msgs float64
	// Bytes is intake bytes per second per producer; negative:
	// unlimited. Defaults to [DefaultIntakeRateBytes].
	Bytes float64
}

// Intake rate defaults: 200 capsules and 4 MiB a second per producer,
// with a burst of one second's worth.
const (
	DefaultIntakeRateMsgs  = 200
	DefaultIntakeRateBytes = 4 << 20
)

func (r IntakeRate) withDefaults() IntakeRate {
	if r.Msgs == 0 {
		r.Msgs = DefaultIntakeRateMsgs
	}
	if r.Bytes == 0 {
		r.Bytes = DefaultIntakeRateBytes
	}
	return r
}

// maxRateEntries bounds the producers remembered; idle ones go first.
const maxRateEntries = 10000

// limiter holds one token bucket pair per producer.
type limiter struct {
	rate IntakeRate
	now  func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	msgs, bytes float64
	at          time.Time
}

func newLimiter(r IntakeRate, now func() time.Time) *limiter {
	return &limiter{rate: r.withDefaults(), now: now, buckets: map[string]*bucket{}}
}

// take charges one message of size bytes to producer and returns 0, or,
// when the producer is over its rate, how long to wait before trying
// again (nothing is charged then). A message larger than a second's bytes
// passes when the bucket is full, so that no message waits forever.
func (l *limiter) take(producer string, size int) time.Duration {
	if producer == "" {
		return 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[producer]
	if b == nil {
		if len(l.buckets) >= maxRateEntries {
			l.prune(now)
		}
		b = &bucket{msgs: max(l.rate.Msgs, 0), bytes: max(l.rate.Bytes, 0), at: now}
		l.buckets[producer] = b
	}
	dt := now.Sub(b.at).Seconds()
	b.at = now
	var wait float64
	if l.rate.Msgs > 0 {
		b.msgs = min(b.msgs+dt*l.rate.Msgs, l.rate.Msgs)
		if b.msgs < 1 {
			wait = max(wait, (1-b.msgs)/l.rate.Msgs)
		}
	}
	if l.rate.Bytes > 0 {
		b.bytes = min(b.bytes+dt*l.rate.Bytes, l.rate.Bytes)
		need := min(float64(size), l.rate.Bytes)
		if b.bytes < need {
			wait = max(wait, (need-b.bytes)/l.rate.Bytes)
		}
	}
	if wait > 0 {
		return max(time.Duration(wait*float64(time.Second)), time.Millisecond)
	}
	if l.rate.Msgs > 0 {
		b.msgs--
	}
	if l.rate.Bytes > 0 {
		b.bytes -= float64(size) // may go below 0: a large message costs more than a second
	}
	return 0
}

// prune forgets the producers idle for a second or more (their buckets
// are full again), or all when none is.
func (l *limiter) prune(now time.Time) {
	for p, b := range l.buckets {
		if now.Sub(b.at) >= time.Second {
			delete(l.buckets, p)
		}
	}
	if len(l.buckets) >= maxRateEntries {
		clear(l.buckets)
	}
}
