package phases

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/locks"
	"github.com/sagad/sagad/machine"
)

// ErrClaimHeld is returned by Input.Claim when another live instance is
// already running the executor for this cycle.
var ErrClaimHeld = machine.ErrClaimHeld

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
	// Concatenated, not formatted: it is made at every call (the
	// fmt.Sprintf it replaces wrote the same bytes; TestIDsAsSprintf).
	return capsuleID + "/" + strconv.Itoa(cycle)
}

// AttemptKey is the idempotency key of attempt n of a cycle: the first keeps
// [IdempotencyKey], a retry of the failure policy gets "<key>/a<n>", so a
// worker that deduplicates by key runs it afresh.
func AttemptKey(capsuleID string, cycle, n int) string {
	if n <= 1 {
		return IdempotencyKey(capsuleID, cycle)
	}
	return capsuleID + "/" + strconv.Itoa(cycle) + "/a" + strconv.Itoa(n)
}

// execChargeID is the budget charge id of attempt n's usage.
func execChargeID(key string, cycle, n int) string {
	if n <= 1 {
		return key + "/" + strconv.Itoa(cycle) + "/exec"
	}
	return key + "/" + strconv.Itoa(cycle) + "/exec/a" + strconv.Itoa(n)
}

// Run takes the locks, finds the cycle's outcome (running the executor under
// the failure policy unless an earlier delivery recorded or stored it),
// stores the artifact and charges the budget.
func (e Execution) Run(ctx context.Context, env *Env, in *Input) Decision {
	if stop := e.lock(ctx, env, in); stop != nil {
		return *stop
	}
	o, stop := e.outcome(ctx, env, in)
	if stop != nil {
		return *stop
	}
	return e.finish(ctx, env, in, o)
}

// outcome is what the cycle's executor did, however it is known.
type outcome struct {
	res executors.Result
	// failed is a failure recorded with the result (accepted work that
	// completed failing): it halts, the failure policy is not asked.
	failed *executors.FailedError
	// ref is the artifact already stored for the cycle, "" if none.
	ref string
	// a is where the attempts stand: the charge of res goes under attempt
	// a.done+1's id.
	a attempts
}

// lock takes every lock the capsule requires (Rule 17).
func (e Execution) lock(ctx context.Context, env *Env, in *Input) *Decision {
	paths := in.Capsule.Constraints.ResourceLocksRequired
	lockStart := time.Now()
	if err := env.Locks.AcquireAll(ctx, paths, in.Key()); err != nil {
		var aerr *locks.AcquireError
		if !errors.As(err, &aerr) || !errors.Is(err, locks.ErrHeld) {
			d := RetryLater(fmt.Errorf("execution: acquire locks: %w", err))
			return &d
		}
		env.record().LockWait(time.Since(lockStart), true)
		d := e.contended(env, in, aerr.Path, err)
		return &d
	}
	if len(paths) > 0 {
		env.record().LockWait(time.Since(lockStart), false)
	}
	return nil
}

// outcome is the cycle's recorded result, else the artifact a delivery that
// died stored, else the executor's calls: never run again what ran.
func (e Execution) outcome(ctx context.Context, env *Env, in *Input) (outcome, *Decision) {
	st, cycle := in.Checkpoint.State, in.Cycle()
	o := outcome{a: startAttempts(in, capsule.Execution)}
	if r := st.Result; r != nil && r.Cycle == cycle {
		// Recorded already (accepted work that completed later): never run
		// the executor again for this cycle.
		o.res.Usage, o.ref = r.Usage, r.ArtifactRef
		if r.Failed != "" {
			o.failed = &executors.FailedError{Detail: r.Failed, Usage: r.Usage}
		}
		return o, nil
	}
	if err := in.claim(ctx); err != nil {
		d := RetryLater(fmt.Errorf("execution: claim cycle %d: %w", cycle, err))
		return o, &d
	}
	// A delivery that claimed this cycle before us (the snapshot is from
	// before our claim) may have stored the artifact and died.
	if in.Redelivered || (st.Execution != nil && st.Execution.Cycle == cycle) {
		stored, found, err := env.Artifacts.Lookup(ctx, in.Capsule.CapsuleID, cycle)
		if err != nil {
			d := RetryLater(fmt.Errorf("execution: look up artifact: %w", err))
			return o, &d
		}
		if found {
			// It died after storing the artifact but before recording it:
			// the executor already ran for this cycle.
			o.res = executors.Result{Content: stored.Content, MediaType: stored.MediaType, Usage: stored.Usage}
			o.ref = stored.Ref
			return o, nil
		}
	}
	return e.call(ctx, env, in, o)
}

// call runs the executor under its failure policy until an attempt
// succeeds or the policy ends the phase.
func (e Execution) call(ctx context.Context, env *Env, in *Input, o outcome) (outcome, *Decision) {
	c := in.Capsule
	ex, err := env.Executors.Executor(c.Task.Kind)
	if err != nil {
		d := HaltWith(capsule.ExecutorFailed("no executor for task.kind "+c.Task.Kind), capsule.Finding{Rule: 22, Field: "task.kind", Message: err.Error()})
		return o, &d
	}
	inputs, stop := contextArtifacts(ctx, env, c)
	if stop != nil {
		return o, stop
	}
	p := failurePolicy{
		phase: capsule.Execution, step: "execution", agent: "executor",
		policy:   env.Executors.Policy(c.Task.Kind),
		chargeID: execChargeID,
	}
	o.a, stop = p.run(ctx, env, in, in.Checkpoint.State.Caps(c.Budget), o.a, func(n int, prev *executors.PreviousFailure) (*executors.FailedError, *Decision) {
		res, failed, d := e.attempt(ctx, env, in, ex, inputs, n, prev)
		o.res = res
		return failed, d
	})
	return o, stop
}

// failed says what came of an executor call that failed with err (not
// nil): a failure for the policy to judge, its usage taken into res, or a
// decision that ends the phase. Apart from attempt, so that a call that
// succeeds (nearly every one) does not allocate the variable errors.As needs.
func (e Execution) failed(ctx context.Context, env *Env, cycle int, token string, err error, res *executors.Result) (*executors.FailedError, *Decision) {
	var failed *executors.FailedError
	switch {
	case errors.Is(err, executors.ErrAccepted):
		d := e.accepted(env, cycle, token, err)
		return nil, &d
	case errors.Is(err, executors.ErrHumanInput):
		d := ParkWith(capsule.TriggerBlockedExternal, "the executor needs human input: "+err.Error())
		return nil, &d
	case errors.As(err, &failed):
		res.Usage = failed.Usage
		return failed, nil
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &executors.FailedError{Detail: "timed out: " + err.Error()}, nil
	case ctx.Err() != nil:
		d := RetryLater(fmt.Errorf("execution: interrupted: %w", err))
		return nil, &d
	}
	return &executors.FailedError{Detail: err.Error()}, nil
}

// attempt makes attempt n's executor call and says what came of it: a
// result, a failure for the policy, or a decision (accepted work, a human
// wanted, an interrupted call).
func (e Execution) attempt(ctx context.Context, env *Env, in *Input, ex executors.Executor, inputs []capsule.Artifact, n int, prev *executors.PreviousFailure) (executors.Result, *executors.FailedError, *Decision) {
	c, cycle := in.Capsule, in.Cycle()
	// A new secret per call, a repeat included: only the worker called last
	// can complete the cycle, and the checkpoint keeps no more than its hash.
	token, err := executors.NewCompletionToken()
	if err != nil {
		d := RetryLater(fmt.Errorf("execution: %w", err))
		return executors.Result{}, nil, &d
	}
	priorRef := priorArtifact(c, in.Checkpoint, cycle)
	var prior *capsule.Artifact
	if priorRef != "" && env.Artifacts != nil {
		a, err := env.Artifacts.Get(ctx, priorRef)
		switch {
		case errors.Is(err, ErrArtifactGone):
			// Expired from the store: the ref alone still says which.
		case err != nil:
			d := RetryLater(fmt.Errorf("execution: load prior artifact %s: %w", priorRef, err))
			return executors.Result{}, nil, &d
		default:
			if a.Ref == "" {
				a.Ref = priorRef
			}
			prior = &a
		}
	}
	// The call's worker may fetch exactly the artifacts it names, by
	// reference, with the call's token.
	refs := make([]string, 0, len(inputs)+1)
	if prior != nil {
		refs = append(refs, prior.Ref)
	}
	for _, a := range inputs {
		refs = append(refs, a.Ref)
	}
	revoke := env.grant(token, c.CapsuleID, refs)
	callStart := time.Now()
	res, err := e.run(ctx, env, in, ex, executors.Request{
		Capsule:          c,
		Raw:              in.Raw,
		Cycle:            cycle,
		IdempotencyKey:   AttemptKey(c.CapsuleID, cycle, n),
		TraceID:          in.Checkpoint.TraceID,
		Findings:         runFindings(c, in.Checkpoint, cycle),
		PriorArtifactRef: priorRef,
		PriorArtifact:    prior,
		CompletionToken:  token,
		CallToken:        in.CallToken,
		PreviousFailure:  prev,
		ContextArtifacts: inputs,
		OperatorAnswer:   in.operatorAnswer(),
		InlineBytes:      env.InlineArtifactBytes,
	})
	if !errors.Is(err, executors.ErrAccepted) {
		// Accepted work may still fetch until the grant expires.
		revoke()
	}
	env.record().CallTraced("executor", callResult(err, ctx), time.Since(callStart), traceIDOf(ctx))
	var failed *executors.FailedError
	if err != nil {
		var d *Decision
		if failed, d = e.failed(ctx, env, cycle, token, err, &res); d != nil {
			return res, nil, d
		}
	}
	if uerr := res.Usage.Validate(); uerr != nil {
		// Never recorded or charged: negative usage would give budget back
		// (executors written in Go are not checked by the wire decoders).
		res.Usage = capsule.Usage{}
		if failed == nil {
			failed = &executors.FailedError{Detail: "executor reported " + uerr.Error()}
		} else {
			failed.Usage = capsule.Usage{}
		}
	}
	return res, failed, nil
}

// accepted parks the capsule until the executor's result arrives on a
// completion carrying token.
func (e Execution) accepted(env *Env, cycle int, token string, err error) Decision {
	d := ParkWith(capsule.TriggerBlockedExternal, "waiting for the executor's result: "+err.Error())
	d.Record = &Record{AwaitingCycle: cycle, AwaitingTokenHash: executors.CompletionTokenHash(token)}
	var acc *executors.AcceptedError
	if errors.As(err, &acc) && acc.Timeout > 0 {
		// The endpoint's completion_timeout, from now.
		until := env.Now().Add(acc.Timeout)
		d.Record.AwaitingUntil = &until
	}
	return d
}

// finish stores the artifact, charges the budget and decides. What the
// executor did is recorded even if the phase's time ran out: its writes are
// retried while the claim holds (ctx ends when the claim is lost or the
// phase's time is up), since a result thrown away would call the agent again.
func (e Execution) finish(ctx context.Context, env *Env, in *Input, o outcome) Decision {
	st, cycle := in.Checkpoint.State, in.Cycle()
	caps := st.Caps(in.Capsule.Budget)
	if o.failed == nil && o.ref == "" {
		// Stored before the budget is charged, so a crash in between finds
		// the artifact instead of running the executor again.
		ref, stop := e.store(ctx, env, in, o.res)
		if stop != nil {
			return *stop
		}
		o.ref = ref
	}
	charge, err := chargeUsage(ctx, env, in, execChargeID(in.Key(), cycle, o.a.done+1), caps, o.a.used, o.res.Usage, false)
	if err != nil {
		return RetryLater(fmt.Errorf("execution: charge budget: %w", err))
	}
	used := charge.Capsule
	if o.failed != nil {
		d := HaltWith(capsule.ExecutorFailed(o.failed.Detail))
		d.Record = &Record{BudgetUsed: &used}
		return d
	}
	record := &Record{BudgetUsed: &used, Result: &capsule.ExecutionResult{Cycle: cycle, ArtifactRef: o.ref, Usage: o.res.Usage}}
	if charge.Exceeded != "" {
		d := HaltWith(capsule.BudgetExceeded(charge.Exceeded), budgetFinding(charge.Capsule, caps, charge.Exceeded))
		d.Record = record
		return d
	}
	d := AdvanceWith()
	d.Record = record
	warnBudget(env, &d, st, charge.Capsule, caps)
	return d
}

// store writes the cycle's artifact, retrying while runCtx lasts.
func (e Execution) store(runCtx context.Context, env *Env, in *Input, res executors.Result) (string, *Decision) {
	ctx := context.WithoutCancel(runCtx)
	// A delivery whose claim lapsed must not overwrite the artifact of the
	// one that took the cycle over.
	if err := in.revalidate(ctx); err != nil {
		d := RetryLater(fmt.Errorf("execution: claim lost before storing the artifact: %w", err))
		return "", &d
	}
	c := in.Capsule
	artifact := capsule.Artifact{
		SchemaVersion:   "1.0",
		CapsuleID:       c.CapsuleID,
		ProducerAgentID: c.ProducerAgentID,
		Cycle:           in.Cycle(),
		MediaType:       res.MediaType,
		SHA256:          sha256Hex(res.Content),
		Size:            int64(len(res.Content)),
		Usage:           res.Usage,
		CreatedAt:       env.Now().UTC(),
		Content:         res.Content,
	}
	var ref string
	err := persist(runCtx, env, func() (err error) { ref, err = env.Artifacts.Put(ctx, artifact); return err })
	if err != nil {
		d := RetryLater(fmt.Errorf("execution: store artifact: %w", err))
		return "", &d
	}
	return ref, nil
}

// contended decides what a lock held by another capsule means: keep
// retrying for a while, then park with lock_contention; halt when the
// capsule's deadline passes while it waits, or at once when LockWait < 0.
func (e Execution) contended(env *Env, in *Input, path string, err error) Decision {
	finding := capsule.Finding{Rule: 17, Title: "Locks before execution", Field: "constraints.resource_locks_required", Message: err.Error()}
	now := env.Now()
	if env.LockWait < 0 || !now.Before(in.Checkpoint.State.DeadlineIn(in.Capsule.Deadline)) {
		return HaltWith(capsule.LockAcquisitionFailed(path), finding)
	}
	if !in.Entered.IsZero() && now.Sub(in.Entered) > env.LockWait {
		return ParkWith(capsule.TriggerLockContention, fmt.Sprintf("lock %s held by another capsule for over %s", path, env.LockWait))
	}
	delay := env.LockWait / 10
	if delay > 5*time.Second {
		delay = 5 * time.Second
	}
	return RetryAfter(delay, fmt.Errorf("execution: %w", err))
}

// warnBudget makes d pause the capsule after its transition when a cap is
// more than env.BudgetWarning used, once per capsule (until caps are raised).
func warnBudget(env *Env, d *Decision, st capsule.CheckpointState, used capsule.Usage, caps capsule.Budget) {
	if env.BudgetWarning <= 0 || st.HasWarned(capsule.TriggerBudgetWarning) {
		return
	}
	frac := budget.Fraction(used, caps)
	if frac <= env.BudgetWarning {
		return
	}
	d.Trigger = capsule.TriggerBudgetWarning
	d.Reason = fmt.Sprintf("%.0f%% of a budget cap used (%d tokens, $%.4f of %d tokens, $%.4f)", frac*100, used.Tokens, used.Dollars, caps.Tokens, caps.Dollars)
	if d.Record == nil {
		d.Record = &Record{}
	}
	d.Record.Warned = capsule.TriggerBudgetWarning
}

func budgetFinding(used capsule.Usage, caps capsule.Budget, exceeded string) capsule.Finding {
	if exceeded == capsule.BudgetParentTokens || exceeded == capsule.BudgetParentDollars {
		return capsule.Finding{
			Rule: 16, Title: "Token and dollar budgets", Field: "parent_capsule_id",
			Message: fmt.Sprintf("used %d tokens / $%.4f: with it an ancestor's own spend plus its descendants' crosses the ancestor's caps", used.Tokens, used.Dollars),
		}
	}
	return capsule.Finding{
		Rule: 16, Title: "Token and dollar budgets", Field: "budget",
		Message: fmt.Sprintf("used %d tokens / $%.4f against caps %d / $%.4f", used.Tokens, used.Dollars, caps.Tokens, caps.Dollars),
	}
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

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	var h [2 * sha256.Size]byte
	hex.Encode(h[:], sum[:])
	return string(h[:]) // one allocation: EncodeToString made two
}

// callResult names an agent call's outcome for metrics.
func callResult(err error, ctx context.Context) string {
	var failed *executors.FailedError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, executors.ErrAccepted), errors.Is(err, executors.ErrHumanInput):
		return "accepted"
	case errors.As(err, &failed):
		return "failed"
	case ctx.Err() != nil:
		return "transient"
	}
	return "failed"
}

// nopRecorder records nothing.
type nopRecorder struct{}

func (nopRecorder) LockWait(time.Duration, bool)                     {}
func (nopRecorder) Spend(string, string, capsule.Usage, bool)        {}
func (nopRecorder) CallTraced(string, string, time.Duration, string) {}
func (nopRecorder) ReviewCycle(capsule.Verdict)                      {}
func (nopRecorder) Attempt(string, string)                           {}

func (env *Env) record() Recorder {
	if env.Metrics == nil {
		return nopRecorder{}
	}
	return env.Metrics
}

// persist runs write until it succeeds or runCtx ends, waiting
// env.RetryDelay between tries: what an agent call produced is kept, and its
// writes retried, for as long as this delivery holds the claim, so a live
// sagad never calls an agent twice because a write failed (a full disk, a
// server restarting). Each try has its own short deadline (the store's).
func persist(runCtx context.Context, env *Env, write func() error) error {
	for {
		err := write()
		if err == nil {
			return nil
		}
		if errors.Is(err, corrupt.ErrCorrupt) {
			// A value sagad did not write (a budget record) reads the same
			// every time: the capsule halts state_corrupt instead.
			return err
		}
		if env.Logger != nil {
			env.Logger.Warn("a write of an agent's result failed: keeping the claim and trying again", "error", err)
		}
		select {
		case <-runCtx.Done():
			return err
		case <-time.After(max(env.RetryDelay, 10*time.Millisecond)):
		}
	}
}

// operatorAnswer is a copy of the latest answer a person gave: the
// holder's, when it knows a newer one than the input's checkpoint (an
// agent's question answered during an earlier attempt of this delivery),
// else the input checkpoint's. A copy: the checkpoint is the pipeline's
// cache, and an executor must not reach into it.
func (in *Input) operatorAnswer() *capsule.OperatorAnswer {
	a := in.Checkpoint.State.OperatorAnswer
	if h, ok := in.Holder.(AnswerHolder); ok {
		if latest := h.OperatorAnswer(); latest != nil {
			a = latest
		}
	}
	if a == nil {
		return nil
	}
	c := *a
	return &c
}

// AnswerHolder is a [Holder] that knows the latest answer a person gave
// the capsule while its phase runs (a question of its agent answered).
type AnswerHolder interface {
	OperatorAnswer() *capsule.OperatorAnswer
}

// priorArtifact is the artifact a revision cycle revises: the latest one
// recorded, which is the previous cycle's (this cycle's is recorded only
// with its result, after which the executor is not called again). A run's
// first cycle revises nothing, except a verification loop's step from
// round 2: it revises its own last artifact of the round before, which
// sagad named in chain.prior_artifact (RECEPTION held it to the schema; a
// ref that is not an artifact's is not read).
func priorArtifact(c *capsule.Capsule, cp *capsule.Checkpoint, cycle int) string {
	if cp.RunCycle(cycle) <= 1 {
		if c.Chain != nil && c.Chain.Round > 1 && strings.HasPrefix(c.Chain.PriorArtifact, "artifact:") {
			return c.Chain.PriorArtifact
		}
		return ""
	}
	if len(cp.State.ArtifactRefs) == 0 {
		return ""
	}
	return cp.State.ArtifactRefs[len(cp.State.ArtifactRefs)-1]
}

// runFindings are the findings a cycle addresses on a revision cycle of the
// current run: the last review's; after an operator's revise, the
// reviewer's then the operator's (capsule.Checkpoint.RevisionFindings). A
// run's first cycle addresses the verifier's findings a verification
// loop's round carries (chain.findings, as RECEPTION accepted them), and
// nothing else: a replayed run's first cycle starts afresh, like a first
// run's.
func runFindings(c *capsule.Capsule, cp *capsule.Checkpoint, cycle int) []capsule.Finding {
	if cp.RunCycle(cycle) <= 1 {
		if c.Chain == nil || len(c.Chain.Findings) == 0 {
			return nil
		}
		out := make([]capsule.Finding, len(c.Chain.Findings))
		for i, f := range c.Chain.Findings {
			f.Source = capsule.FindingSourceVerifier
			out[i] = f
		}
		return out
	}
	return cp.RevisionFindings()
}

// traceIDOf is the trace id of the span in ctx (the phase's, or the
// capsule's root context when tracing is off), "" when there is none.
func traceIDOf(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}
