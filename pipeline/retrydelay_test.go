package pipeline_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/locks"
	"github.com/sagad/sagad/pipeline"
)

// naks records the delay of every nak the consumers log ("message will be
// retried", with retry_in) whose error contains a substring.
type naks struct {
	slog.Handler
	mu     *sync.Mutex
	delays *[]time.Duration
	match  string
}

func (n naks) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "message will be retried" {
		var delay time.Duration
		var matched bool
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "retry_in":
				delay = a.Value.Duration()
			case "error":
				matched = strings.Contains(a.Value.String(), n.match)
			}
			return true
		})
		if matched {
			n.mu.Lock()
			*n.delays = append(*n.delays, delay)
			n.mu.Unlock()
		}
	}
	return n.Handler.Handle(ctx, r)
}

func (n naks) WithAttrs(as []slog.Attr) slog.Handler {
	n.Handler = n.Handler.WithAttrs(as)
	return n
}

func (n naks) WithGroup(g string) slog.Handler {
	n.Handler = n.Handler.WithGroup(g)
	return n
}

func (n naks) first() (time.Duration, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(*n.delays) == 0 {
		return 0, false
	}
	return (*n.delays)[0], true
}

// TestRetryNaksWithTheDecisionsDelay: a Retry decision that names its delay
// is redelivered after that delay, not after RetryDelay plus it. A capsule
// whose lock another holder keeps retries every LockWait/10 (1s here) while
// RetryDelay is 2s; before, its nak asked for 3s.
func TestRetryNaksWithTheDecisionsDelay(t *testing.T) {
	t.Parallel()
	rec := naks{mu: new(sync.Mutex), delays: new([]time.Duration), match: "lock"}
	f := setupWith(t, func(c *pipeline.Config) {
		c.LockWait = 10 * time.Second
		c.RetryDelay = 2 * time.Second
		rec.Handler = c.Logger.Handler()
		c.Logger = slog.New(rec)
	})
	a := f.admin(t)
	ctx := context.Background()
	// RECEPTION refuses a capsule whose lock is held: take it once the
	// capsule is queued at EXECUTION.
	require.NoError(t, a.PausePhase(ctx, capsule.Execution))
	doc := f.own(t, capsuletest.New())
	f.publish(t, doc.Sealed(t))
	// Queued at EXECUTION: its message waits there (the checkpoint shows
	// PLANNING until EXECUTION writes the deferred advances).
	queued(t, f, capsule.Execution, 1)
	lm, err := locks.New(ctx, f.js, locks.Config{})
	require.NoError(t, err)
	path := "own-" + doc.ID() + ".txt"
	require.NoError(t, lm.TryAcquire(ctx, path, "someone-else"))
	require.NoError(t, a.ResumePhase(ctx, capsule.Execution))
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		_, ok := rec.first()
		return ok
	}, "EXECUTION never retried on the held lock")
	delay, _ := rec.first()
	require.Equal(t, time.Second, delay)
	require.NoError(t, lm.Release(ctx, path, "someone-else"))
	f.waitState(t, doc.ID(), capsule.Completed)
}
