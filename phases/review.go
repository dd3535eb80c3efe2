package phases

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/machine"
)

// Review is phase 5 (Rules 12, 15, 16): the independent reviewer judges the
// cycle's artifact. CHANGES_REQUESTED loops back to EXECUTION until the cycle
// limit, REJECTED halts at once, and an approval by the producer itself is
// turned into a rejection.
type Review struct{}

// Run calls the reviewer and decides.
func (Review) Run(ctx context.Context, env *Env, in *Input) Decision {
	c, key, cycle := in.Capsule, in.Key(), in.Cycle()
	st := in.Checkpoint.State
	if st.Result == nil || st.Result.Cycle != cycle || st.Result.ArtifactRef == "" {
		return HaltWith(capsule.ExecutorFailed(fmt.Sprintf("no artifact recorded for cycle %d", cycle)))
	}
	artifact, err := env.Artifacts.Get(ctx, st.Result.ArtifactRef)
	if errors.Is(err, ErrArtifactGone) {
		// Parked longer than the retention between EXECUTION and REVIEW:
		// the executor's result is recorded, so it is not run again.
		return HaltWith(capsule.ExecutorFailed(fmt.Sprintf("artifact %s is gone (kept for the retention after it was written)", st.Result.ArtifactRef)))
	}
	if err != nil {
		return RetryAfter(env.RetryDelay, fmt.Errorf("review: load artifact: %w", err))
	}
	// A capsule that declares no reviewer is served by the configured
	// default (AUTOMATED_GATES judged that one under Rules 20 and 22); the
	// review entry records who reviewed.
	reviewerID, _ := env.Rules.Reviewer(c)
	rv, err := env.Executors.Reviewer(reviewerID)
	if err != nil {
		return HaltWith(capsule.ExecutorFailed("no reviewer "+reviewerID), capsule.Finding{Rule: 20, Field: "review.reviewer_agent_id", Message: err.Error()})
	}
	if in.Claim != nil {
		// One reviewer call per cycle, however often the message is delivered.
		if err := in.Claim(ctx); err != nil {
			return RetryAfter(env.RetryDelay, fmt.Errorf("review: claim cycle %d: %w", cycle, err))
		}
	}
	// Failed attempts of this cycle's review the failure policy already
	// recorded: the next call is attempt done+1, charged under its own id.
	done, last := st.FailedAttemptsAt(capsule.ReviewPhase, cycle)
	used := st.BudgetUsed
	caps := st.Caps(c.Budget)
	policy := env.Executors.ReviewerPolicy(reviewerID)
	var res executors.ReviewResult
	for {
		attempt := done + 1
		callStart := time.Now()
		res, err = rv.Review(ctx, executors.ReviewRequest{
			Capsule:         c,
			Raw:             in.Raw,
			Cycle:           cycle,
			Artifact:        artifact,
			IdempotencyKey:  AttemptKey(c.CapsuleID, cycle, attempt),
			TraceID:         in.Checkpoint.TraceID,
			PreviousFailure: previousFailure(done, last),
		})
		env.record().Call("reviewer", callResult(err, ctx), time.Since(callStart))
		var failed *executors.FailedError
		if errors.As(err, &failed) && !failed.Usage.Valid() {
			failed.Usage = capsule.Usage{} // never charged: it would give budget back
		}
		if err == nil {
			if uerr := res.Usage.Validate(); uerr != nil {
				return HaltWith(capsule.ExecutorFailed("reviewer reported " + uerr.Error()))
			}
		}
		switch {
		case errors.Is(err, executors.ErrAccepted), errors.Is(err, executors.ErrHumanInput):
			return ParkWith(capsule.TriggerBlockedExternal, "the reviewer needs time or a human: "+err.Error())
		case errors.As(err, &failed):
			// The failed call still consumed what it consumed (Rule 16),
			// under this attempt's own charge id.
			var charge budget.ChargeResult
			if cerr := persist(ctx, env, func() (err error) {
				charge, err = env.Budgets.Charge(context.WithoutCancel(ctx), key, c.WaveID, reviewChargeID(key, cycle, attempt), caps, used, failed.Usage)
				return err
			}); cerr != nil {
				return RetryAfter(env.RetryDelay, fmt.Errorf("review: charge budget: %w", cerr))
			}
			env.record().BudgetConsumed(failed.Usage)
			used = charge.Capsule
			action := policy.Decide(failed, done)
			if charge.Exceeded != "" && action != executors.ActionHalt {
				d := HaltWith(capsule.BudgetExceeded(charge.Exceeded), budgetFinding(used, caps))
				d.Record = &Record{BudgetUsed: &used}
				return d
			}
			if action == executors.ActionHalt || in.RecordAttempt == nil {
				d := HaltWith(capsule.ExecutorFailed("reviewer: " + failed.Detail))
				d.Record = &Record{BudgetUsed: &used}
				return d
			}
			// Retry or pause: recorded before the next call, so a
			// redelivery goes on with the next attempt's key.
			pf := executors.NewPreviousFailure(attempt, failed)
			lf := capsule.AttemptFailure{ExitCode: pf.ExitCode, Timeout: pf.Timeout, Error: pf.Error, StderrTail: pf.StderrTail}
			if err := in.RecordAttempt(ctx, machine.RecordAttempt{Phase: capsule.ReviewPhase, Cycle: cycle, Attempt: attempt, Failure: lf, BudgetUsed: used}); err != nil {
				return RetryAfter(env.RetryDelay, fmt.Errorf("review: record attempt %d: %w", attempt, err))
			}
			if action == executors.ActionPause {
				return ParkWith(capsule.TriggerBlockedExternal, "the reviewer asks for a person: "+failed.Detail)
			}
			done, last = attempt, &lf
			continue
		case err != nil && ctx.Err() != nil:
			return RetryAfter(env.RetryDelay, fmt.Errorf("review: interrupted: %w", err))
		case err != nil:
			return HaltWith(capsule.ExecutorFailed("reviewer: " + err.Error()))
		}
		break
	}
	chargeID := reviewChargeID(key, cycle, done+1)
	res = EnforceIndependence(reviewerID, artifact.ProducerAgentID, res)
	env.record().ReviewCycle(res.Verdict)
	env.record().BudgetConsumed(res.Usage)

	var charge budget.ChargeResult
	err = persist(ctx, env, func() (err error) {
		charge, err = env.Budgets.Charge(context.WithoutCancel(ctx), key, c.WaveID, chargeID, caps, used, res.Usage)
		return err
	})
	if err != nil {
		return RetryAfter(env.RetryDelay, fmt.Errorf("review: charge budget: %w", err))
	}
	entry := capsule.ReviewEntry{
		Cycle: cycle, ReviewerID: reviewerID, Verdict: res.Verdict,
		Findings: res.Findings, Usage: res.Usage, At: env.Now().UTC(),
	}
	used = charge.Capsule
	record := &Record{BudgetUsed: &used, Review: &entry}
	var d Decision
	switch {
	case charge.Exceeded != "":
		d = HaltWith(capsule.BudgetExceeded(charge.Exceeded), budgetFinding(charge.Capsule, caps))
	case c.Review.OperatorGate.All():
		// Every verdict goes before the operator, who accepts, revises or
		// rejects: nothing is revised or halted automatically.
		d = Decision{Action: Advance, Wait: true}
	default:
		// Rule 12 counts the cycles of this run (a replay starts afresh).
		d = ReviewDecision(res.Verdict, in.Checkpoint.RunCycle(cycle), c.CycleLimit())
	}
	d.Findings = append(d.Findings, res.Findings...)
	d.Record = record
	if d.Action == Advance && c.Review.OperatorGate.On() {
		d.Wait = true
	}
	if d.Action != Halt && !d.Wait {
		warnBudget(env, &d, st, charge.Capsule, caps)
	}
	return d
}

// reviewChargeID is the budget charge id of the review's attempt n.
func reviewChargeID(key string, cycle, n int) string {
	if n <= 1 {
		return fmt.Sprintf("%s/%d/review", key, cycle)
	}
	return fmt.Sprintf("%s/%d/review/a%d", key, cycle, n)
}

// ReviewDecision maps a verdict on cycle `cycle` to a decision under Rule 12.
func ReviewDecision(v capsule.Verdict, cycle, limit int) Decision {
	switch v {
	case capsule.Approved:
		return AdvanceWith()
	case capsule.ChangesRequested:
		if cycle >= limit {
			return HaltWith(capsule.MaxCyclesExceeded(limit))
		}
		return Decision{Action: LoopBack}
	default:
		return HaltWith(capsule.ReviewRejectedTerminal())
	}
}

// EnforceIndependence applies Rule 15: an approval by the artifact's own
// producer becomes a rejection with a Rule 15 finding, whatever the reviewer said.
func EnforceIndependence(reviewerID, producerID string, res executors.ReviewResult) executors.ReviewResult {
	if reviewerID != producerID || res.Verdict != capsule.Approved {
		return res
	}
	res.Verdict = capsule.Rejected
	res.Findings = append(res.Findings, capsule.Finding{
		Rule: 15, Title: "Reviewer is never the producer", Field: "review.reviewer_agent_id",
		Message: fmt.Sprintf("reviewer %q is the artifact's producer; approval refused", reviewerID),
	})
	return res
}
