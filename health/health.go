package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/internal/cas"
	"github.com/sagad/sagad/metrics"
)

// Config configures a [Monitor].
type Config struct {
	// UnhealthyAfter is how long writes to one stream or bucket must keep
	// failing (none to it succeeding meanwhile) before sagad reports itself
	// unhealthy. Defaults to 30s.
	UnhealthyAfter time.Duration
	// StallAfter is how long a consumer with pending work may go without
	// progress before it counts as stalled. Defaults to 2m.
	StallAfter time.Duration
	// Consumers are the consumers watched for stalls. Defaults to none.
	Consumers []Consumer
	// Logger receives one ERROR line when writes have failed for
	// UnhealthyAfter (naming the stream or bucket and the cause) and one
	// INFO line when they succeed again. Defaults to discarding.
	Logger *slog.Logger
	// Metrics counts failed writes and shows whether writes are failing.
	// Nil records nothing.
	Metrics *metrics.Metrics
	// Now is the clock of stall detection. Defaults to time.Now.
	Now func() time.Time
}

// Consumer names a durable consumer watched for stalls.
type Consumer struct {
	// Stream and Name are the stream and the durable consumer's name.
	Stream, Name string
	// Label names it in reports ("phase 3 AUTOMATED_GATES").
	Label string
}

func (c Config) withDefaults() Config {
	if c.UnhealthyAfter <= 0 {
		c.UnhealthyAfter = 30 * time.Second
	}
	if c.StallAfter <= 0 {
		c.StallAfter = 2 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Monitor tracks sagad's health: whether its JetStream writes succeed
// ([Monitor.ObserveWrite], fed by every write through internal/jspub.Writes),
// and whether its consumers make progress ([Monitor.Settled] and the
// consumers' ack floors). [Monitor.Check] reports both for /readyz. It is
// safe for concurrent use; a nil *Monitor observes nothing and is healthy.
type Monitor struct {
	cfg Config

	mu sync.Mutex
	// runs are the targets (streams, buckets) whose writes fail: a run
	// begins with a failed write and ends with a write to the same target
	// that succeeds. Successes elsewhere do not end it: a stream at its
	// store limit refuses writes while the others take theirs, and the
	// capsules it holds cannot advance.
	runs map[string]*run
	// unhealthy: some run has lasted UnhealthyAfter.
	unhealthy bool
	progress  map[string]*progress
}

// run is one target's unbroken run of failed writes.
type run struct {
	since, last time.Time // its first and latest failure
	kind, cause string
	err         error
	expired     bool        // it has lasted UnhealthyAfter
	timer       *time.Timer // fires when it has
}

// progress is what a consumer last did: when this process last finished one
// of its messages, and the ack floor last read and since when it stands.
type progress struct {
	settled   time.Time
	floor     uint64
	floorSeen time.Time
}

// New returns a Monitor; it starts healthy.
func New(cfg Config) *Monitor {
	cfg = cfg.withDefaults()
	cfg.Metrics.WritesFailing(false)
	return &Monitor{cfg: cfg, runs: make(map[string]*run), progress: make(map[string]*progress)}
}

// Stop stops the timers of the runs of failures in progress.
func (m *Monitor) Stop() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.runs {
		r.timer.Stop()
	}
}

// ObserveWrite takes the target (a stream or bucket name) and result of one
// JetStream write: nil, or its error. A refusal of the request itself (a
// lost compare-and-set, a missing key, a bad request) proves JetStream works
// and counts as a success; timeouts, storage and availability refusals and a
// lost connection count as failures (see [Kind]). Writes turn unhealthy
// when one target's writes have failed for UnhealthyAfter with none of its
// own succeeding meanwhile, whatever the other targets do.
func (m *Monitor) ObserveWrite(target string, err error) {
	if m == nil {
		return
	}
	kind, failed := Kind(err)
	if failed {
		m.cfg.Metrics.WriteFailed(kind)
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !failed {
		if len(m.runs) == 0 {
			return
		}
		if r := m.runs[target]; r != nil {
			m.end(target, r)
		}
		// A target not written for twice the window while another takes
		// its writes says nothing any more (no capsule waits on it: a
		// failed write is retried within the retry delay); without this a
		// bucket written rarely (continuations) would keep sagad
		// unhealthy long after the space came back.
		for t, r := range m.runs {
			if now.Sub(r.last) > 2*m.cfg.UnhealthyAfter {
				m.end(t, r)
			}
		}
		if m.unhealthy && !m.anyExpired() {
			m.unhealthy = false
			m.cfg.Metrics.WritesFailing(false)
			// INFO: a recovery needs no one, and an alert on ERROR lines
			// must not fire on the good news; "jetstream writes" starts
			// both lines, so whoever follows the first finds its end.
			m.cfg.Logger.Info("jetstream writes succeed again", "target", target)
		}
		return
	}
	r := m.runs[target]
	if r == nil {
		r = &run{since: now}
		r.timer = time.AfterFunc(m.cfg.UnhealthyAfter, func() { m.expire(target, r) })
		m.runs[target] = r
	}
	r.last, r.kind, r.cause, r.err = now, kind, Cause(err), err
}

// end ends target's run r.
func (m *Monitor) end(target string, r *run) {
	r.timer.Stop()
	delete(m.runs, target)
}

func (m *Monitor) anyExpired() bool {
	for _, r := range m.runs {
		if r.expired {
			return true
		}
	}
	return false
}

// expire marks target's run r as having lasted UnhealthyAfter, unless it
// ended meanwhile, and turns writes unhealthy with one ERROR line.
func (m *Monitor) expire(target string, r *run) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.runs[target] != r {
		return
	}
	r.expired = true
	attrs := []any{"target", target, "cause", r.cause, "kind", r.kind,
		"failing_for", time.Since(r.since).Round(time.Millisecond), "error", r.err}
	if m.unhealthy {
		m.cfg.Logger.Warn("jetstream writes are failing on another target too", attrs...)
		return
	}
	m.unhealthy = true
	m.cfg.Metrics.WritesFailing(true)
	m.cfg.Logger.Error("jetstream writes are failing: capsules cannot advance until they succeed", attrs...)
}

// ErrWritesFailing is wrapped by [Monitor.Writes] while writes fail.
var ErrWritesFailing = errors.New("jetstream writes failing")

// Writes returns nil unless some target's JetStream writes have been
// failing for longer than UnhealthyAfter; then an error wrapping
// [ErrWritesFailing] that says, per such target, for how long, the cause,
// the kind and the latest error.
func (m *Monitor) Writes() error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.unhealthy {
		return nil
	}
	var parts []string
	for t, r := range m.runs {
		if r.expired {
			parts = append(parts, fmt.Sprintf("%s for %s: %s (%s): %v", t, time.Since(r.since).Round(100*time.Millisecond), r.cause, r.kind, r.err))
		}
	}
	sort.Strings(parts)
	return fmt.Errorf("%w: %s", ErrWritesFailing, strings.Join(parts, "; "))
}

// Causes of failed writes named by [Cause], in the ERROR line and /readyz.
const (
	CauseInsufficientResources = "insufficient resources"
	CauseStoreLimit            = "store limit"
	CauseTimeouts              = "timeouts"
	CauseNoResponders          = "no responders"
	CauseUnavailable           = "jetstream unavailable"
	CauseConnection            = "connection lost"
	CauseOther                 = "other"
)

// Cause names what a failed write says about the server, for people: its
// disk or a storage limit is full (insufficient resources), a stream's own
// limit is reached or its store cannot write (store limit), or no answer
// came (timeouts: nats-server does not answer a write its disk refused).
func Cause(err error) string {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case errCodeInsufficientResources, errCodeAccountResources, errCodeStorageExceeded, errCodeMemoryExceeded:
			return CauseInsufficientResources
		case errCodeStoreFailed:
			return CauseStoreLimit
		}
		return CauseUnavailable
	}
	switch kind, _ := Kind(err); kind {
	case metrics.WriteTimeout:
		return CauseTimeouts
	case metrics.WriteNoResponders:
		return CauseNoResponders
	case metrics.WriteUnavailable:
		return CauseUnavailable
	case metrics.WriteConnection:
		return CauseConnection
	}
	return CauseOther
}

// Kind sorts a write's result: failed reports whether it says JetStream
// cannot take writes, and kind is then one of metrics.WriteErrorKinds.
func Kind(err error) (kind string, failed bool) {
	if err == nil || cas.Conflict(err) || errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyExists) {
		return "", false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch {
		case apiErr.ErrorCode == errCodeInsufficientResources, apiErr.ErrorCode == errCodeAccountResources, apiErr.ErrorCode == errCodeStorageExceeded,
			apiErr.ErrorCode == errCodeMemoryExceeded, apiErr.ErrorCode == errCodeStoreFailed:
			return metrics.WriteStorage, true
		case apiErr.Code >= 500:
			return metrics.WriteUnavailable, true
		}
		return "", false // the server answered: the request was refused, JetStream works
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return metrics.WriteTimeout, true
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		return metrics.WriteNoResponders, true
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected):
		return metrics.WriteConnection, true
	}
	return metrics.Other, true
}

// JetStream error codes (nats-server's errors.json) the jetstream client
// has no constant for.
const (
	errCodeAccountResources      = 10002 // resource limits exceeded for account (a 400, yet no fault of the request)
	errCodeInsufficientResources = 10023 // insufficient resources (a server or account storage limit reached)
	errCodeMemoryExceeded        = 10028 // insufficient memory resources available
	errCodeStorageExceeded       = 10047 // insufficient storage resources available
	errCodeStoreFailed           = 10077 // the stream's store failed to write
)
