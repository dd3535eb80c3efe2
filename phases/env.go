package phases

import (
	"context"
	"log/slog"
	"time"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/rules"
)

// Locks is the part of the lock manager the phases use (see package locks).
type Locks interface {
	Available(ctx context.Context, path, holder string) (bool, error)
	AcquireAll(ctx context.Context, paths []string, holder string) error
	ReleaseAll(ctx context.Context, paths []string, holder string) error
	Renew(ctx context.Context, paths []string, holder string) error
}

// Budgets charges usage against a capsule's caps and its wave's (Rule 16).
// used is what the capsule's checkpoint says it has consumed so far: a
// capsule outside any wave is accounted in its checkpoint alone (the
// transition's compare-and-set makes the charge happen once), so only wave
// charges need the budget bucket.
type Budgets interface {
	Charge(ctx context.Context, capsuleID, waveID, chargeID string, caps capsule.Budget, used, u capsule.Usage) (budget.ChargeResult, error)
}

// AncestorBudgets is implemented by a [Budgets] that also keeps a
// delegation tree's budget (parent_capsule_id, package budget's tree.go):
// ReserveChild reserves a child's caps at its parent before anything is
// spent (AUTOMATED_GATES); ChargeAncestors charges u, spent by child, to
// parent and each ancestor above it, once per chargeID, and returns the first ancestor cap crossed
// ([capsule.BudgetParentTokens] or [capsule.BudgetParentDollars]), ""
// when none is; ChargeOwn charges a capsule's own spend into its family
// record (which it makes if need be) and returns the family.
type AncestorBudgets interface {
	ReserveChild(ctx context.Context, parent, holder string, caps capsule.Budget) (budget.ChildAdmission, error)
	ChargeAncestors(ctx context.Context, parent, child, chargeID string, u capsule.Usage) (string, error)
	ChargeOwn(ctx context.Context, key, parent, chargeID string, caps capsule.Budget, u capsule.Usage) (budget.Family, error)
}

// Resolver tells whether a context ref or target exists (REALITY_ANCHOR).
type Resolver interface {
	Exists(ctx context.Context, ref string) (bool, error)
}

// Artifacts stores and loads artifact records.
// ErrArtifactGone is returned (wrapped) by Artifacts.Get for an artifact that
// is not, or no longer, stored (see [capsule.ErrArtifactGone]).
var ErrArtifactGone = capsule.ErrArtifactGone

type Artifacts interface {
	Put(ctx context.Context, a capsule.Artifact) (ref string, err error)
	Get(ctx context.Context, ref string) (capsule.Artifact, error)
	// Lookup finds the artifact of (capsuleID, cycle), if one was stored.
	Lookup(ctx context.Context, capsuleID string, cycle int) (capsule.Artifact, bool, error)
}

// Recorder is what phases report to metrics (see package metrics). A nil
// *metrics.Metrics is a valid Recorder that records nothing.
type Recorder interface {
	LockWait(d time.Duration, contended bool)
	// Spend is what one call of a capsule of task kind in wave ("" for
	// none) charged; failed: the call failed.
	Spend(kind, wave string, u capsule.Usage, failed bool)
	// CallTraced is one agent call, with its trace id (the latency's
	// exemplar; "" for none).
	CallTraced(kind, result string, d time.Duration, traceID string)
	// Attempt counts an attempt the failure policy judged: result is "ok"
	// or its decision on a failure (capsule.AttemptRetried, …).
	Attempt(role, result string)
	ReviewCycle(verdict capsule.Verdict)
}

// Env is what phases may touch. Every member is safe for concurrent use.
type Env struct {
	Locks   Locks
	Budgets Budgets
	// Waves admits wave capsules at AUTOMATED_GATES; nil admits every one
	// (Rule 19 alone judges the wave).
	Waves     WaveAdmission
	Resolver  Resolver
	Artifacts Artifacts
	Executors *executors.Registry
	Rules     rules.Config
	Facts     rules.Facts
	Logger    *slog.Logger
	Metrics   Recorder
	// MaxIntakeBytes is the hard limit on intake bytes (capsule_too_large).
	MaxIntakeBytes int
	// Now is the clock; tests replace it.
	Now func() time.Time
	// RetryDelay is how long a transient failure waits before redelivery.
	RetryDelay time.Duration
	// LockWait is how long EXECUTION keeps retrying contended locks before
	// the capsule parks with lock_contention. Negative halts at once with
	// lock_acquisition_failed (the strictest reading of Rule 17).
	LockWait time.Duration
	// ChildWait: a child capsule whose caps do not fit what its parent's
	// caps have left waits (trigger parent_capacity) rather than halting.
	ChildWait bool
	// BudgetWarning is the fraction of a cap whose crossing pauses the
	// capsule with budget_warning (once). Zero disables the trigger.
	BudgetWarning float64
	// InlineArtifactBytes is the largest artifact content an executor
	// request carries inline (executors.Request.InlineBytes); 0 means the
	// default, 256 KiB.
	InlineArtifactBytes int64
	// Grants lets each agent call's worker fetch the artifacts the call
	// names by reference (saga.artifacts.get); nil grants nothing.
	Grants ArtifactGrants
	// Steps names a composition's steps, for what a person is told to
	// type (the operator gate's reason); nil names them by index.
	Steps StepNames
}

// StepNames names step (an index) of run run of producer's composition id,
// from its record: a capsule's chain member knows only the index.
type StepNames interface {
	StepName(ctx context.Context, id, producer string, run, step int) (string, error)
}

// ArtifactGrants records which artifacts a call's worker may fetch: Grant
// lets the holder of token read exactly refs of capsuleID until revoke is
// called (or the grant expires, for work a worker accepted and finishes
// later).
type ArtifactGrants interface {
	Grant(token, capsuleID string, refs []string) (revoke func())
}

// grant is env.Grants.Grant, a no-op without Grants.
func (env *Env) grant(token, capsuleID string, refs []string) func() {
	if env.Grants == nil || token == "" || len(refs) == 0 {
		return func() {}
	}
	return env.Grants.Grant(token, capsuleID, refs)
}

// Input is one capsule at one phase.
type Input struct {
	Capsule *capsule.Capsule
	Raw     []byte
	// Checkpoint is the capsule's checkpoint as the phase starts. It is
	// shared with the pipeline's cache: read it, never change it (a phase
	// changes the checkpoint through its Decision).
	Checkpoint *capsule.Checkpoint
	// Claim takes the checkpoint's execution claim for the current cycle
	// before an executor runs; it fails if another live instance holds it.
	Claim func(ctx context.Context) error
	// CallToken is the secret of the claim Claim took (set by Claim): the
	// executor calls carry it as call_token, and a child capsule published
	// while serving one presents it (parent_capsule_id).
	CallToken string
	// Progress, when set, is called on every EXECUTION heartbeat (with the
	// lock renewal). The pipeline leaves it nil: its own heartbeat keeps the
	// message and the claim alive for every phase.
	Progress func()
	// Entered is when the capsule entered this phase (its message's time).
	Entered time.Time
	// Redelivered says this message was delivered before: an earlier
	// delivery may have done part of the phase's work.
	Redelivered bool
	// Revalidate confirms this delivery still holds its claim before it
	// writes what a long agent call produced; nil means nothing to check.
	Revalidate func(ctx context.Context) error
	// RecordAttempt records a failed executor call through the machine
	// (with this delivery's claim as holder) before the failure policy
	// calls again or pauses; nil means the policy never retries or pauses.
	RecordAttempt func(ctx context.Context, ev machine.RecordAttempt) error
	// Holder, when set, stands in for Claim, Revalidate and RecordAttempt
	// (which are then ignored): the pipeline's attempt implements it on a
	// value already on the heap, where the three functions were three
	// closures made for every attempt.
	Holder Holder
}

// Holder is the delivery a phase runs for, as the holder of its claim: the
// methods do what Input's functions of the same names do (Claim sets the
// input's CallToken).
type Holder interface {
	Claim(ctx context.Context) error
	Revalidate(ctx context.Context) error
	RecordAttempt(ctx context.Context, ev machine.RecordAttempt) error
}

// claims says the input can take a claim (Holder or Claim set).
func (in *Input) claims() bool { return in.Holder != nil || in.Claim != nil }

// claim takes the claim through Holder, or Claim.
func (in *Input) claim(ctx context.Context) error {
	if in.Holder != nil {
		return in.Holder.Claim(ctx)
	}
	return in.Claim(ctx)
}

// revalidate confirms the claim through Holder, or Revalidate when set.
func (in *Input) revalidate(ctx context.Context) error {
	if in.Holder != nil {
		return in.Holder.Revalidate(ctx)
	}
	if in.Revalidate == nil {
		return nil
	}
	return in.Revalidate(ctx)
}

// recordsAttempts says the input can record a failed attempt (Holder or
// RecordAttempt set).
func (in *Input) recordsAttempts() bool { return in.Holder != nil || in.RecordAttempt != nil }

// recordAttempt records a failed attempt through Holder, or RecordAttempt.
func (in *Input) recordAttempt(ctx context.Context, ev machine.RecordAttempt) error {
	if in.Holder != nil {
		return in.Holder.RecordAttempt(ctx, ev)
	}
	return in.RecordAttempt(ctx, ev)
}

// Key is the checkpoint key of the input's capsule.
func (in *Input) Key() string { return in.Checkpoint.Key }

// Cycle is the capsule's current cycle.
func (in *Input) Cycle() int { return in.Checkpoint.State.Cycle }

// Phase is one saga phase.
type Phase interface {
	// Run decides what happens to the capsule. It must be safe to call again
	// for the same input after a crash or redelivery.
	Run(ctx context.Context, env *Env, in *Input) Decision
}
