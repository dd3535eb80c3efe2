package health

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrStalled is wrapped by [Monitor.Stalls] for a consumer that has pending
// work and made no progress for StallAfter.
var ErrStalled = errors.New("stalled")

// Settled tells the monitor that this process finished one message of
// consumer: acknowledged it as done or terminated it. A nak is no progress
// (the same work comes back).
func (m *Monitor) Settled(consumer string) {
	if m == nil {
		return
	}
	now := m.cfg.Now()
	m.mu.Lock()
	m.prog(consumer).settled = now
	m.mu.Unlock()
}

func (m *Monitor) prog(consumer string) *progress {
	p, ok := m.progress[consumer]
	if !ok {
		p = &progress{}
		m.progress[consumer] = p
	}
	return p
}

// Stalls reads the state of every watched consumer and returns an error
// (joined, each wrapping [ErrStalled]) for each that has pending work
// (messages not yet delivered or not yet acknowledged) but made no progress
// for StallAfter: no message of it finished in this process and its ack
// floor — which any sagad's acknowledgements move — has not moved. A
// consumer's clock starts when it is first read, so a stall shows at the
// earliest StallAfter after the first call; it also restarts whenever the
// consumer is found with nothing pending. A consumer that cannot be read is
// reported too.
func (m *Monitor) Stalls(ctx context.Context, js jetstream.JetStream) error {
	if m == nil {
		return nil
	}
	var errs []error
	for _, c := range m.cfg.Consumers {
		cons, err := js.Consumer(ctx, c.Stream, c.Name)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: consumer %s: %w", c.Label, c.Name, err))
			continue
		}
		info := cons.CachedInfo()
		pending := info.NumPending + uint64(max(info.NumAckPending, 0))
		now := m.cfg.Now()
		m.mu.Lock()
		p := m.prog(c.Name)
		if p.floorSeen.IsZero() || info.AckFloor.Stream != p.floor || pending == 0 {
			p.floor, p.floorSeen = info.AckFloor.Stream, now
		}
		last := p.floorSeen
		if p.settled.After(last) {
			last = p.settled
		}
		m.mu.Unlock()
		idle := now.Sub(last)
		if pending == 0 || idle < m.cfg.StallAfter {
			continue
		}
		why := ""
		if info.Paused {
			why = " (its consumer is paused: sagactl phase resume)"
		}
		errs = append(errs, fmt.Errorf("%s %w: %d messages pending, no progress for %s%s",
			c.Label, ErrStalled, pending, idle.Round(time.Second), why))
	}
	return errors.Join(errs...)
}

// Check is what /readyz asks: nil when writes succeed and no consumer is
// stalled, else the reasons.
func (m *Monitor) Check(ctx context.Context, js jetstream.JetStream) error {
	if m == nil {
		return nil
	}
	return errors.Join(m.Writes(), m.Stalls(ctx, js))
}
