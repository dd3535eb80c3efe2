package phases

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
)

// Review is phase 5 (Rules 12, 15, 16): the independent reviewer judges the
// cycle's artifact. CHANGES_REQUESTED loops back to EXECUTION until the cycle
// limit, REJECTED halts at once, and an approval by the producer itself is
// turned into a rejection.
type Review struct{}

// Run loads the cycle's artifact, calls the reviewer under its failure
// policy and decides on the verdict.
func (r Review) Run(ctx context.Context, env *Env, in *Input) Decision {
	artifact, stop := r.artifact(ctx, env, in)
	if stop != nil {
		return *stop
	}
	// A capsule that declares no reviewer is served by the configured
	// default (AUTOMATED_GATES judged that one under Rules 20 and 22); the
	// review entry records who reviewed.
	reviewerID, _ := env.Rules.Reviewer(in.Capsule)
	rv, err := env.Executors.Reviewer(reviewerID)
	if err != nil {
		return HaltWith(capsule.ExecutorFailed("no reviewer "+reviewerID), capsule.Finding{Rule: 20, Field: "review.reviewer_agent_id", Message: err.Error()})
	}
	if in.claims() {
		// One reviewer call per cycle, however often the message is delivered.
		if err := in.claim(ctx); err != nil {
			return RetryLater(fmt.Errorf("review: claim cycle %d: %w", in.Cycle(), err))
		}
	}
	res, a, stop := r.call(ctx, env, in, reviewerID, rv, artifact)
	if stop != nil {
		return *stop
	}
	res = EnforceIndependence(reviewerID, artifact.ProducerAgentID, res)
	env.record().ReviewCycle(res.Verdict)
	return r.decide(ctx, env, in, reviewerID, res, a)
}

// artifact loads the artifact the cycle's execution recorded.
func (Review) artifact(ctx context.Context, env *Env, in *Input) (capsule.Artifact, *Decision) {
	st, cycle := in.Checkpoint.State, in.Cycle()
	if st.Result == nil || st.Result.Cycle != cycle || st.Result.ArtifactRef == "" {
		d := HaltWith(capsule.ExecutorFailed(fmt.Sprintf("no artifact recorded for cycle %d", cycle)))
		return capsule.Artifact{}, &d
	}
	artifact, err := env.Artifacts.Get(ctx, st.Result.ArtifactRef)
	if errors.Is(err, ErrArtifactGone) {
		// Parked longer than the retention between EXECUTION and REVIEW:
		// the executor's result is recorded, so it is not run again.
		d := HaltWith(capsule.ExecutorFailed(fmt.Sprintf("artifact %s is gone (kept for the retention after it was written)", st.Result.ArtifactRef)))
		return artifact, &d
	}
	if err != nil {
		d := RetryLater(fmt.Errorf("review: load artifact: %w", err))
		return artifact, &d
	}
	return artifact, nil
}

// call runs the reviewer under its failure policy until an attempt returns
// a verdict or the policy ends the phase.
func (r Review) call(ctx context.Context, env *Env, in *Input, reviewerID string, rv executors.Reviewer, artifact capsule.Artifact) (executors.ReviewResult, attempts, *Decision) {
	p := failurePolicy{
		phase: capsule.ReviewPhase, step: "review", agent: "reviewer", haltPrefix: "reviewer: ",
		policy:   env.Executors.ReviewerPolicy(reviewerID),
		chargeID: reviewChargeID,
	}
	var res executors.ReviewResult
	caps := in.Checkpoint.State.Caps(in.Capsule.Budget)
	a, stop := p.run(ctx, env, in, caps, startAttempts(in, capsule.ReviewPhase), func(n int, prev *executors.PreviousFailure) (*executors.FailedError, *Decision) {
		var failed *executors.FailedError
		var d *Decision
		res, failed, d = r.attempt(ctx, env, in, rv, artifact, n, prev)
		return failed, d
	})
	return res, a, stop
}

// attempt makes attempt n's reviewer call and says what came of it: a
// verdict, a failure for the policy, or a decision (a reviewer that needs
// time or a human, an interrupted call, an error that is no failure of the
// policy's table).
func (Review) attempt(ctx context.Context, env *Env, in *Input, rv executors.Reviewer, artifact capsule.Artifact, n int, prev *executors.PreviousFailure) (executors.ReviewResult, *executors.FailedError, *Decision) {
	c, cycle := in.Capsule, in.Cycle()
	// A secret per call, for fetching the artifact under review by ref.
	token, err := executors.NewCompletionToken()
	if err != nil {
		d := RetryLater(fmt.Errorf("review: %w", err))
		return executors.ReviewResult{}, nil, &d
	}
	revoke := env.grant(token, c.CapsuleID, []string{artifact.Ref})
	callStart := time.Now()
	res, err := rv.Review(ctx, executors.ReviewRequest{
		Capsule:         c,
		Raw:             in.Raw,
		Cycle:           cycle,
		Artifact:        artifact,
		IdempotencyKey:  AttemptKey(c.CapsuleID, cycle, n),
		TraceID:         in.Checkpoint.TraceID,
		PreviousFailure: prev,
		CallToken:       token,
	})
	if !errors.Is(err, executors.ErrAccepted) {
		revoke()
	}
	env.record().CallTraced("reviewer", callResult(err, ctx), time.Since(callStart), traceIDOf(ctx))
	if err == nil {
		if uerr := res.Usage.Validate(); uerr != nil {
			d := HaltWith(capsule.ExecutorFailed("reviewer reported " + uerr.Error()))
			return res, nil, &d
		}
		return res, nil, nil
	}
	failed, d := reviewFailed(ctx, err)
	return res, failed, d
}

// reviewFailed says what came of a reviewer call that failed with err: a
// failure for the policy to judge, or a decision that ends the phase. Apart
// from attempt, so that a call that succeeds (nearly every one) allocates
// neither of the variables errors.As and the decision need.
func reviewFailed(ctx context.Context, err error) (*executors.FailedError, *Decision) {
	var failed *executors.FailedError
	var d Decision
	switch {
	case errors.Is(err, executors.ErrAccepted), errors.Is(err, executors.ErrHumanInput):
		d = ParkWith(capsule.TriggerBlockedExternal, "the reviewer needs time or a human: "+err.Error())
	case errors.As(err, &failed):
		if !failed.Usage.Valid() {
			failed.Usage = capsule.Usage{} // never charged: it would give budget back
		}
		return failed, nil
	case ctx.Err() != nil:
		d = RetryLater(fmt.Errorf("review: interrupted: %w", err))
	default:
		d = HaltWith(capsule.ExecutorFailed("reviewer: " + err.Error()))
	}
	return nil, &d
}

// decide charges the verdict's usage and maps the verdict to a decision
// (Rule 12), through the operator's gate when the capsule asks for one.
func (Review) decide(ctx context.Context, env *Env, in *Input, reviewerID string, res executors.ReviewResult, a attempts) Decision {
	c, st, cycle := in.Capsule, in.Checkpoint.State, in.Cycle()
	caps := st.Caps(c.Budget)
	charge, err := chargeUsage(ctx, env, in, reviewChargeID(in.Key(), cycle, a.done+1), caps, a.used, res.Usage, false)
	if err != nil {
		return RetryLater(fmt.Errorf("review: charge budget: %w", err))
	}
	entry := capsule.ReviewEntry{
		Cycle: cycle, ReviewerID: reviewerID, Verdict: res.Verdict,
		Findings: res.Findings, Usage: res.Usage, At: env.Now().UTC(),
	}
	used := charge.Capsule
	var d Decision
	switch {
	case charge.Exceeded != "":
		d = HaltWith(capsule.BudgetExceeded(charge.Exceeded), budgetFinding(charge.Capsule, caps, charge.Exceeded))
	case c.Review.OperatorGate.All():
		// Every verdict goes before the operator, who accepts, revises or
		// rejects: nothing is revised or halted automatically.
		d = Decision{Action: Advance, Wait: true}
	default:
		// Rule 12 counts the cycles of this run (a replay starts afresh).
		d = ReviewDecision(res.Verdict, in.Checkpoint.RunCycle(cycle), c.CycleLimit())
	}
	d.Findings = append(d.Findings, res.Findings...)
	d.Record = &Record{BudgetUsed: &used, Review: &entry}
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
		return key + "/" + strconv.Itoa(cycle) + "/review"
	}
	return key + "/" + strconv.Itoa(cycle) + "/review/a" + strconv.Itoa(n)
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
