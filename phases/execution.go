package phases

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/locks"
)

// ErrClaimHeld is returned by Input.Claim when another live instance is
// already running the executor for this cycle.
var ErrClaimHeld = errors.New("execution claim held by another instance")

// Execution is phase 4 (Rules 16 and 17): acquire every lock, run the
// executor once per cycle, record usage and the artifact. Locks are released
// by the pipeline after the transition is recorded, whatever the outcome.
type Execution struct {
	// Heartbeat is how often a running executor's message and locks are
	// kept alive. Defaults to 5s.
	Heartbeat time.Duration
}

// IdempotencyKey is the key every executor and reviewer call carries.
func IdempotencyKey(capsuleID string, cycle int) string {
	return fmt.Sprintf("%s/%d", capsuleID, cycle)
}

// Run takes the locks, claims the cycle, runs the executor and charges the budget.
func (e Execution) Run(ctx context.Context, env *Env, in *Input) Decision {
	c, key, cycle := in.Capsule, in.Key(), in.Cycle()
	paths := c.Constraints.ResourceLocksRequired
	if err := env.Locks.AcquireAll(ctx, paths, key); err != nil {
		var aerr *locks.AcquireError
		if errors.As(err, &aerr) && errors.Is(err, locks.ErrHeld) {
			return HaltWith(capsule.LockAcquisitionFailed(aerr.Path), capsule.Finding{
				Rule: 17, Title: "Locks before execution", Field: "constraints.resource_locks_required", Message: err.Error(),
			})
		}
		return RetryAfter(env.RetryDelay, fmt.Errorf("execution: acquire locks: %w", err))
	}
	if err := in.Claim(ctx); err != nil {
		return RetryAfter(env.RetryDelay, fmt.Errorf("execution: claim cycle %d: %w", cycle, err))
	}
	ex, err := env.Executors.Executor(c.Task.Kind)
	if err != nil {
		return HaltWith(capsule.ExecutorFailed("no executor for task.kind "+c.Task.Kind), capsule.Finding{Rule: 22, Field: "task.kind", Message: err.Error()})
	}

	res, err := e.run(ctx, env, in, ex, executors.Request{
		Capsule:        c,
		Raw:            in.Raw,
		Cycle:          cycle,
		IdempotencyKey: IdempotencyKey(c.CapsuleID, cycle),
		TraceID:        in.Checkpoint.TraceID,
		Findings:       lastReviewFindings(in.Checkpoint),
	})
	var failed *executors.FailedError
	switch {
	case errors.As(err, &failed):
		res.Usage = failed.Usage
	case err != nil && ctx.Err() != nil:
		return RetryAfter(env.RetryDelay, fmt.Errorf("execution: interrupted: %w", err))
	case err != nil:
		failed = &executors.FailedError{Detail: err.Error()}
	}

	charge, err := env.Budgets.Charge(ctx, key, c.WaveID, fmt.Sprintf("%s/%d/exec", key, cycle), c.Budget, res.Usage)
	if err != nil {
		return RetryAfter(env.RetryDelay, fmt.Errorf("execution: charge budget: %w", err))
	}
	record := func(st *capsule.CheckpointState) { st.BudgetUsed = charge.Capsule }
	if failed != nil {
		d := HaltWith(capsule.ExecutorFailed(failed.Detail))
		d.Mutate = record
		return d
	}

	artifact := capsule.Artifact{
		SchemaVersion:   "1.0",
		CapsuleID:       c.CapsuleID,
		ProducerAgentID: c.ProducerAgentID,
		Cycle:           cycle,
		MediaType:       res.MediaType,
		SHA256:          sha256Hex(res.Content),
		Size:            int64(len(res.Content)),
		Usage:           res.Usage,
		CreatedAt:       env.Now().UTC(),
		Content:         res.Content,
	}
	ref, err := env.Artifacts.Put(ctx, artifact)
	if err != nil {
		return RetryAfter(env.RetryDelay, fmt.Errorf("execution: store artifact: %w", err))
	}
	mutate := func(st *capsule.CheckpointState) {
		record(st)
		st.Result = &capsule.ExecutionResult{Cycle: cycle, ArtifactRef: ref, Usage: res.Usage}
		st.ArtifactRefs = appendUnique(st.ArtifactRefs, ref)
	}
	if charge.Exceeded != "" {
		d := HaltWith(capsule.BudgetExceeded(charge.Exceeded), capsule.Finding{
			Rule: 16, Title: "Token and dollar budgets", Field: "budget",
			Message: fmt.Sprintf("used %d tokens / $%.4f against caps %d / $%.4f", charge.Capsule.Tokens, charge.Capsule.Dollars, c.Budget.Tokens, c.Budget.Dollars),
		})
		d.Mutate = mutate
		return d
	}
	d := AdvanceWith()
	d.Mutate = mutate
	return d
}

// run calls the executor while keeping the message and the locks alive.
func (e Execution) run(ctx context.Context, env *Env, in *Input, ex executors.Executor, req executors.Request) (executors.Result, error) {
	every := e.Heartbeat
	if every <= 0 {
		every = 5 * time.Second
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if in.Progress != nil {
					in.Progress()
				}
				if err := env.Locks.Renew(ctx, req.Capsule.Constraints.ResourceLocksRequired, in.Key()); err != nil && env.Logger != nil {
					env.Logger.WarnContext(ctx, "renew locks", "capsule_id", req.Capsule.CapsuleID, "error", err)
				}
			}
		}
	}()
	defer func() { close(done); <-stopped }()
	return ex.Execute(ctx, req)
}

func lastReviewFindings(cp *capsule.Checkpoint) []capsule.Finding {
	if n := len(cp.State.Reviews); n > 0 {
		return cp.State.Reviews[n-1].Findings
	}
	return nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func appendUnique(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}
