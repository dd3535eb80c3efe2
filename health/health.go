package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/internal/cas"
	"github.com/sagad/sagad/metrics"
)

// Config configures a [Monitor].
type Config struct {
	// UnhealthyAfter is how long JetStream writes must keep failing (no
	// write succeeding meanwhile) before sagad reports itself unhealthy.
	// Defaults to 30s.
	UnhealthyAfter time.Duration
	// StallAfter is how long a consumer with pending work may go without
	// progress before it counts as stalled. Defaults to 2m.
	StallAfter time.Duration
	// Consumers are the consumers watched for stalls. Defaults to none.
	Consumers []Consumer
	// Logger receives one ERROR line when writes have failed for
	// UnhealthyAfter and one when they succeed again. Defaults to discarding.
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
	// failingSince is when the current run of failed writes began (zero:
	// the last write succeeded); lastKind and lastErr describe its latest.
	failingSince time.Time
	lastKind     string
	lastErr      error
	// unhealthy: the run has lasted UnhealthyAfter; timer fires then.
	unhealthy bool
	timer     *time.Timer
	progress  map[string]*progress
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
	return &Monitor{cfg: cfg, progress: make(map[string]*progress)}
}

// Stop stops the timer of a run of failures in progress.
func (m *Monitor) Stop() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
}

// ObserveWrite takes the result of one JetStream write: nil, or its error.
// A refusal of the request itself (a lost compare-and-set, a missing key, a
// bad request) proves JetStream works and counts as a success; timeouts,
// storage and availability refusals and a lost connection count as
// failures (see [Kind]).
func (m *Monitor) ObserveWrite(err error) {
	if m == nil {
		return
	}
	kind, failed := Kind(err)
	if failed {
		m.cfg.Metrics.WriteFailed(kind)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !failed {
		if m.failingSince.IsZero() {
			return
		}
		failedFor := time.Since(m.failingSince)
		m.failingSince, m.lastErr, m.lastKind = time.Time{}, nil, ""
		if m.timer != nil {
			m.timer.Stop()
			m.timer = nil
		}
		if m.unhealthy {
			m.unhealthy = false
			m.cfg.Metrics.WritesFailing(false)
			// At ERROR too: whoever follows the first line finds its end.
			m.cfg.Logger.Error("jetstream writes succeed again", "failed_for", failedFor.Round(time.Millisecond))
		}
		return
	}
	m.lastErr, m.lastKind = err, kind
	if !m.failingSince.IsZero() {
		return
	}
	since := time.Now()
	m.failingSince = since
	m.timer = time.AfterFunc(m.cfg.UnhealthyAfter, func() { m.expire(since) })
}

// expire turns the run of failures that began at since unhealthy, unless a
// write succeeded meanwhile.
func (m *Monitor) expire(since time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unhealthy || !m.failingSince.Equal(since) {
		return
	}
	m.unhealthy = true
	m.timer = nil
	m.cfg.Metrics.WritesFailing(true)
	m.cfg.Logger.Error("jetstream writes are failing: capsules cannot advance until they succeed",
		"failing_for", time.Since(since).Round(time.Millisecond), "kind", m.lastKind, "error", m.lastErr)
}

// ErrWritesFailing is wrapped by [Monitor.Writes] while writes fail.
var ErrWritesFailing = errors.New("jetstream writes failing")

// Writes returns nil unless JetStream writes have been failing for longer
// than UnhealthyAfter; then an error wrapping [ErrWritesFailing] that says
// for how long, of what kind and the latest error.
func (m *Monitor) Writes() error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.unhealthy {
		return nil
	}
	return fmt.Errorf("%w for %s (%s): %v", ErrWritesFailing, time.Since(m.failingSince).Round(time.Second), m.lastKind, m.lastErr)
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
