package sagatest

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sagad/sagad/executors"
)

// CountingStub counts executor runs around the stub executor.
type CountingStub struct {
	N *atomic.Int64
	// Gate, when non-nil, holds each run until it receives a value.
	Gate chan struct{}
}

// Execute implements executors.Executor.
func (c CountingStub) Execute(ctx context.Context, req executors.Request) (executors.Result, error) {
	c.N.Add(1)
	if c.Gate != nil {
		select {
		case <-c.Gate:
		case <-ctx.Done():
			return executors.Result{}, ctx.Err()
		}
	}
	return executors.Stub{}.Execute(ctx, req)
}

// AcceptingStub answers "accepted": the result comes later on the
// completion subject.
type AcceptingStub struct {
	N *atomic.Int64
	// Timeout is the endpoint's completion_timeout (zero: none configured).
	Timeout time.Duration
	// Token, when set, keeps the completion token of the latest call, as a
	// worker must.
	Token *atomic.Pointer[string]
}

// Execute implements executors.Executor.
func (a AcceptingStub) Execute(_ context.Context, req executors.Request) (executors.Result, error) {
	a.N.Add(1)
	if a.Token != nil {
		tok := req.CompletionToken
		a.Token.Store(&tok)
	}
	return executors.Result{}, &executors.AcceptedError{Timeout: a.Timeout}
}
