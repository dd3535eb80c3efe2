package phases

import (
	"context"
	"fmt"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/metrics"
)

// failurePolicy runs one phase's agent calls under the endpoint's failure
// policy (docs/FAILURES.md "Failure policy"): EXECUTION's executor and REVIEW's
// reviewer share it, so a failed attempt is handled the same way in both.
type failurePolicy struct {
	// phase is the step whose calls these are: Execution or ReviewPhase.
	phase capsule.Phase
	// step and agent name the phase and the one it calls in errors and
	// reasons ("execution", "executor"; "review", "reviewer").
	step, agent string
	// haltPrefix starts the detail of executor_failed ("reviewer: " for a
	// reviewer's failure, docs/FAILURES.md's table).
	haltPrefix string
	policy     executors.Policy
	// chargeID is the budget charge id of attempt n at the input's key and
	// cycle: a function of the package, not a closure over them, which
	// would be made for every call.
	chargeID func(key string, cycle, n int) string
}

// policyCall makes attempt n of the phase's call, prev being the failure of
// attempt n-1 (nil on a first attempt). It returns the failure the policy
// judges, or a decision that ends the phase at once (accepted work, a human
// wanted, an interrupted call); neither is a success.
type policyCall func(n int, prev *executors.PreviousFailure) (*executors.FailedError, *Decision)

// attempts is where a cycle's calls stand: failed attempts recorded so far
// (the next call is attempt done+1) and what the capsule has used.
type attempts struct {
	done int
	last *capsule.AttemptFailure
	used capsule.Usage
}

// startAttempts reads the attempts of the current cycle's step p the
// checkpoint recorded, so a redelivery or a resume goes on with the next.
func startAttempts(in *Input, p capsule.Phase) attempts {
	st := in.Checkpoint.State
	done, last := st.FailedAttemptsAt(p, in.Cycle())
	return attempts{done: done, last: last, used: st.BudgetUsed}
}

// run calls until a call succeeds, returning where the attempts stand, or
// until the policy or a call ends the phase, returning that decision. A
// failed attempt goes through the same steps in the same order whatever the
// phase: charge its usage under its own id (Rule 16: a failed call still
// consumed what it did), decide the action, record the attempt when the
// policy goes on (before the next call, so a redelivery takes the next
// attempt's key), then halt, pause or call again. A cap crossed halts
// budget_exceeded unless the policy halts anyway.
func (p failurePolicy) run(ctx context.Context, env *Env, in *Input, caps capsule.Budget, a attempts, call policyCall) (attempts, *Decision) {
	deadline := in.Checkpoint.State.DeadlineIn(in.Capsule.Deadline)
	for {
		n := a.done + 1
		if !deadline.IsZero() && !env.Now().Before(deadline) {
			// Every attempt passes here: none starts after the deadline,
			// whatever kept the capsule until now (a queue, a retry's
			// delay, a redelivery).
			return a, p.halt(in.Checkpoint.DeadlineHalt(p.phase, in.Capsule.Deadline), a.used)
		}
		if d := p.childLimit(in, n, a.used); d != nil {
			return a, d
		}
		failed, stop := call(n, previousFailure(a.done, a.last))
		if stop != nil {
			return a, stop
		}
		if failed == nil {
			env.record().Attempt(p.agent, metrics.AttemptOK)
			return a, nil
		}
		charge, err := chargeUsage(ctx, env, in, p.chargeID(in.Key(), in.Cycle(), n), caps, a.used, failed.Usage, true)
		if err != nil {
			return a, p.retry(env, fmt.Errorf("charge budget: %w", err))
		}
		a.used = charge.Capsule
		action := executors.ActionHalt
		if in.recordsAttempts() {
			// Without a way to record the attempt the policy never goes on.
			action = p.policy.Decide(failed, a.done)
		}
		if action == executors.ActionHalt {
			d := p.halt(capsule.ExecutorFailed(p.haltPrefix+failed.Detail), a.used, p.failureFindings(n, failed)...)
			d.Record.Attempt = p.failedAttempt(ctx, env, in, n, failed, capsule.AttemptHalted)
			return a, d
		}
		if charge.Exceeded != "" {
			d := p.halt(capsule.BudgetExceeded(charge.Exceeded), a.used, budgetFinding(a.used, caps, charge.Exceeded))
			d.Record.Attempt = p.failedAttempt(ctx, env, in, n, failed, capsule.AttemptHalted)
			return a, d
		}
		decision := capsule.AttemptRetried
		if action == executors.ActionPause {
			decision = capsule.AttemptPaused
		}
		lf, err := p.record(ctx, in, n, failed, a.used, decision)
		if err != nil {
			return a, p.retry(env, fmt.Errorf("record attempt %d: %w", n, err))
		}
		p.logAttempt(ctx, env, in, n, failed, decision)
		if action == executors.ActionRetry && failed.RetryAfter > 0 {
			// A rate limit's Retry-After (a model API's): the attempt is
			// recorded, so the message handed back for that long goes on
			// with the next attempt, and no worker is held while it waits.
			d := RetryAfter(failed.RetryAfter, fmt.Errorf("%s: attempt %d failed, retrying after %s: %s", p.step, n, failed.RetryAfter, failed.Detail))
			return a, &d
		}
		if action == executors.ActionPause {
			d := ParkWith(capsule.TriggerBlockedExternal, "the "+p.agent+" asks for a person: "+failed.Detail)
			return a, &d
		}
		a.done, a.last = n, &lf
	}
}

// childLimit halts a child whose parent's budget.child allows no more
// EXECUTION agent calls before attempt n of the current cycle would be one
// too many (docs/DELEGATION.md "Child limits"); nil when the call may go.
func (p failurePolicy) childLimit(in *Input, n int, used capsule.Usage) *Decision {
	l := in.Checkpoint.ChildLimit
	if p.phase != capsule.Execution || l == nil || l.MaxAttempts == 0 {
		return nil
	}
	calls := in.Checkpoint.ExecutionCalls(in.Cycle()) + n - 1
	if calls < l.MaxAttempts {
		return nil
	}
	return p.halt(capsule.ChildLimitExceeded(capsule.ChildLimitAttempts), used, capsule.Finding{
		Field:   "budget.child.max_attempts",
		Message: fmt.Sprintf("the parent %s allows its children %d EXECUTION agent calls; this child made %d", in.Checkpoint.Parent, l.MaxAttempts, calls),
	})
}

// failedAttempt is the log entry of failed attempt n that the policy halts
// on, recorded with the halt; it is logged and counted here, the halt
// being its only record.
func (p failurePolicy) failedAttempt(ctx context.Context, env *Env, in *Input, n int, failed *executors.FailedError, decision string) *capsule.FailedAttempt {
	pf := executors.NewPreviousFailure(n, failed)
	p.logAttempt(ctx, env, in, n, failed, decision)
	return &capsule.FailedAttempt{
		Phase: p.phase, Cycle: in.Cycle(), Attempt: n, ExitCode: pf.ExitCode, Timeout: pf.Timeout,
		Error: pf.Error, Decision: decision, At: env.Now().UTC(),
	}
}

// logAttempt reports failed attempt n and the policy's decision: one INFO
// line and the attempts counter, so retries are seen as they happen and not
// only in a report.
func (p failurePolicy) logAttempt(ctx context.Context, env *Env, in *Input, n int, failed *executors.FailedError, decision string) {
	env.record().Attempt(p.agent, decision)
	if env.Logger == nil {
		return
	}
	pf := executors.NewPreviousFailure(n, failed)
	env.Logger.InfoContext(ctx, "agent attempt failed",
		"capsule_id", in.Capsule.CapsuleID, "phase", p.phase.String(), "cycle", in.Cycle(),
		"trace_id", in.Checkpoint.TraceID, "role", p.agent, "attempt", n,
		"exit_code", pf.ExitCode, "timeout", pf.Timeout, "decision", decision, "error", pf.Error)
}

// record writes failed attempt n into the checkpoint through the machine.
func (p failurePolicy) record(ctx context.Context, in *Input, n int, failed *executors.FailedError, used capsule.Usage, decision string) (capsule.AttemptFailure, error) {
	pf := executors.NewPreviousFailure(n, failed)
	lf := capsule.AttemptFailure{ExitCode: pf.ExitCode, Timeout: pf.Timeout, Error: pf.Error, StderrTail: pf.StderrTail}
	ev := machine.RecordAttempt{Cycle: in.Cycle(), Attempt: n, Failure: lf, BudgetUsed: used, Decision: decision}
	if p.phase != capsule.Execution {
		// EXECUTION's records keep the zero phase they were always written with.
		ev.Phase = p.phase
	}
	return lf, in.recordAttempt(ctx, ev)
}

// failureFindings is the call a halt ends on as a finding: its exit code
// (or timeout) and stderr tail, which the halt reason, the failure's detail
// alone, does not carry; none when there is nothing more to say.
func (p failurePolicy) failureFindings(n int, failed *executors.FailedError) []capsule.Finding {
	pf := executors.NewPreviousFailure(n, failed)
	if failed.Finding != "" {
		// An agent's own words (an error frame's code and description, an
		// unusable verdict) are the finding.
		return []capsule.Finding{{Field: p.agent, Message: fmt.Sprintf("attempt %d: %s", n, failed.Finding)}}
	}
	if pf.ExitCode == 0 && !pf.Timeout && pf.StderrTail == "" {
		return nil
	}
	msg := fmt.Sprintf("attempt %d", n)
	switch {
	case pf.Timeout:
		msg += " timed out"
	case pf.ExitCode != 0:
		msg += fmt.Sprintf(" exited %d", pf.ExitCode)
	default:
		msg += " failed"
	}
	if pf.Error != "" {
		msg += ": " + pf.Error
	}
	if pf.StderrTail != "" {
		msg += "\nstderr (tail):\n" + pf.StderrTail
	}
	return []capsule.Finding{{Field: p.agent, Message: msg}}
}

// halt is a halt decision that records what the capsule has used.
func (p failurePolicy) halt(reason capsule.HaltReason, used capsule.Usage, findings ...capsule.Finding) *Decision {
	d := HaltWith(reason, findings...)
	d.Record = &Record{BudgetUsed: &used}
	return &d
}

// retry is a transient failure of the phase's own writes.
func (p failurePolicy) retry(env *Env, err error) *Decision {
	d := RetryLater(fmt.Errorf("%s: %w", p.step, err))
	return &d
}

// previousFailure is a retry's previous_failure: nil on a first attempt.
func previousFailure(done int, last *capsule.AttemptFailure) *executors.PreviousFailure {
	if done == 0 || last == nil {
		return nil
	}
	return &executors.PreviousFailure{Attempt: done, ExitCode: last.ExitCode, Timeout: last.Timeout, Error: last.Error, StderrTail: last.StderrTail}
}

// chargeUsage charges u under id against the capsule's caps and its wave's.
// The write is retried while runCtx lasts (persist) and each try outlives
// runCtx's cancellation: what an agent call consumed is charged once it is
// known, however the phase's time runs.
func chargeUsage(runCtx context.Context, env *Env, in *Input, id string, caps capsule.Budget, used, u capsule.Usage, failed bool) (budget.ChargeResult, error) {
	var charge budget.ChargeResult
	err := persist(runCtx, env, func() (err error) {
		charge, err = env.Budgets.Charge(context.WithoutCancel(runCtx), in.Key(), in.Capsule.WaveID, id, caps, used, u)
		if err != nil {
			return err
		}
		ab, ok := env.Budgets.(AncestorBudgets)
		if ok && charge.Exceeded == "" && u != (capsule.Usage{}) && (env.Executors == nil || env.Executors.Delegates(in.Capsule.Task.Kind)) {
			// A parent's caps bound its own spend plus its descendants'
			// and what its admitted descendants reserved. Only an executor
			// that can publish children makes a parent: the built-in
			// stub's capsules skip the write.
			fam, err := ab.ChargeOwn(context.WithoutCancel(runCtx), in.Key(), in.Checkpoint.Parent, id, caps, u)
			if err != nil {
				return err
			}
			charge.Exceeded = budget.Check(charge.Capsule.Add(fam.Used).Add(fam.Reserved), caps)
		}
		if parent := in.Checkpoint.Parent; ok && parent != "" && u != (capsule.Usage{}) {
			// The charge's own id, prefixed by the child's key, so each
			// ancestor counts it once whatever is redelivered.
			over, err := ab.ChargeAncestors(context.WithoutCancel(runCtx), parent, in.Key(), in.Key()+"/"+id, u)
			if err != nil {
				return err
			}
			if charge.Exceeded == "" {
				charge.Exceeded = over
			}
		}
		return nil
	})
	if err == nil {
		env.record().Spend(in.Capsule.Task.Kind, in.Capsule.WaveID, u, failed)
	}
	return charge, err
}
