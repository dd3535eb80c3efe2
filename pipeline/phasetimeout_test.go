package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/sagatest"
)

// deadlineProbe is an executor that reports the deadline its call was made
// under, then either answers at once or waits for its context to end.
type deadlineProbe struct {
	wait bool
	seen chan time.Duration // the time left at the call; -1: no deadline
	done chan error         // what a waiting call returned with
}

func (d deadlineProbe) Execute(ctx context.Context, req executors.Request) (executors.Result, error) {
	left := time.Duration(-1)
	if dl, ok := ctx.Deadline(); ok {
		left = time.Until(dl)
	}
	select {
	case d.seen <- left:
	default:
	}
	if !d.wait {
		return executors.Stub{}.Execute(ctx, req)
	}
	<-ctx.Done()
	select {
	case d.done <- ctx.Err():
	default:
	}
	return executors.Result{}, ctx.Err()
}

// TestPhaseTimeoutBoundsTheAgentCall: handle makes no context per message
// any more, yet an agent call is still made under PhaseTimeout (its
// deadline is at most that far), and a call that waits for its context
// ends when the phase's time does.
func TestPhaseTimeoutBoundsTheAgentCall(t *testing.T) {
	t.Parallel()
	const timeout = 700 * time.Millisecond
	quick := deadlineProbe{seen: make(chan time.Duration, 1), done: make(chan error, 1)}
	waits := deadlineProbe{wait: true, seen: make(chan time.Duration, 1), done: make(chan error, 1)}
	f := sagatest.Run(t, func(c *pipeline.Config) {
		c.PhaseTimeout = timeout
		c.Executors.RegisterExecutor("probe-quick", quick)
		c.Executors.RegisterExecutor("probe-waits", waits)
	})

	doc := f.Own(t, capsuletest.New().Set("task.kind", "probe-quick"))
	f.Publish(t, doc.Sealed(t))
	require.Equal(t, capsule.Completed, f.Wait(t, doc.ID()).State)
	left := <-quick.seen
	require.Positive(t, left, "the agent call has a deadline")
	require.LessOrEqual(t, left, timeout, "no later than the phase timeout")

	doc = f.Own(t, capsuletest.New().Set("task.kind", "probe-waits"))
	f.Publish(t, doc.Sealed(t))
	select {
	case err := <-waits.done:
		require.True(t, errors.Is(err, context.DeadlineExceeded), "the call ended by the phase's time: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("an agent call that waits for its context was never ended by the phase timeout")
	}
}
