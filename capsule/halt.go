package capsule

import (
	"slices"
	"sort"
	"strconv"
	"strings"
)

// HaltCode is the stable, bounded part of a halt reason: the text before the
// first ':'. Metrics label by code; the detail names the offending value.
type HaltCode string

// Halt codes of PIPELINE §3, plus the intake codes for bytes that never made
// it to being a capsule.
const (
	// RECEPTION (phase 0).
	CodeSchemaInvalid           HaltCode = "schema_invalid"
	CodeIntegrityMismatch       HaltCode = "integrity_mismatch"
	CodeDeadlineInPast          HaltCode = "deadline_in_past"
	CodeBudgetTokensNonPositive HaltCode = "budget_tokens_non_positive"
	// CodeBudgetDollarsNonPositive is budget_tokens_non_positive's twin for
	// budget.dollars (Rule 16's positivity, not in PIPELINE §3's table).
	CodeBudgetDollarsNonPositive HaltCode = "budget_dollars_non_positive"
	CodeLockUnavailable          HaltCode = "lock_unavailable"
	// CodeCapsuleLimitsExceeded: a list of the capsule is longer than its
	// hard limit (see [Capsule.ListLimits]); not in PIPELINE §3's table.
	CodeCapsuleLimitsExceeded HaltCode = "capsule_limits_exceeded"
	// CodeChainMembershipRefused: the capsule declares a chain step sagad
	// did not assign it (sagactl publish --chain), or declares none under
	// the capsule id of a step sagad assigned (no detail then: see
	// [StepIDRefused]); not in PIPELINE §3's table.
	CodeChainMembershipRefused HaltCode = "chain_membership_refused"
	// CodeDepthExceeded: the capsule's parent_capsule_id puts it deeper
	// than sagad's --max-depth; the detail is its depth. Not in PIPELINE
	// §3's table (seed 001's depth budget).
	CodeDepthExceeded HaltCode = "depth_exceeded"
	// CodeParentRefused: the capsule names a parent_capsule_id without
	// the token of a call that parent has in flight; the detail is the
	// parent's id. Not in PIPELINE §3's table.
	CodeParentRefused HaltCode = "parent_refused"
	// CodeModelNotAllowed: task.model names a tier or model id sagad's
	// "models" config does not list; the detail is the name. Not in
	// PIPELINE §3's table (docs/MODELS.md).
	CodeModelNotAllowed HaltCode = "model_not_allowed"
	// Intake, before a capsule could be read (also RECEPTION).
	CodeNotJSON                  HaltCode = "not_json"
	CodeCapsuleTooLarge          HaltCode = "capsule_too_large"
	CodeUnsupportedSchemaVersion HaltCode = "unsupported_schema_version"
	// REALITY_ANCHOR (phase 1).
	CodeContextRefMissing HaltCode = "context_ref_missing"
	CodeTargetMissing     HaltCode = "target_missing"
	// PLANNING (phase 2).
	CodeSpecNotApproved HaltCode = "spec_not_approved"
	// AUTOMATED_GATES (phase 3).
	CodeAbsoluteRulesViolated HaltCode = "absolute_rules_violated"
	// EXECUTION (phase 4).
	CodeLockAcquisitionFailed HaltCode = "lock_acquisition_failed"
	CodeBudgetExceeded        HaltCode = "budget_exceeded"
	CodeExecutorFailed        HaltCode = "executor_failed"
	// REVIEW (phase 5).
	CodeReviewRejectedTerminal HaltCode = "review_rejected_terminal"
	CodeMaxCyclesExceeded      HaltCode = "max_cycles_exceeded"
	// The operator gate (an operator's decision).
	CodeOperatorRejected HaltCode = "operator_rejected"
	// Dependencies (a capsule waiting at AUTOMATED_GATES).
	CodeDependencyFailed  HaltCode = "dependency_failed"
	CodeDependencyMissing HaltCode = "dependency_missing"
	// CodeDependencyCycle: the capsule's dependencies wait for it in
	// turn; the detail lists every capsule of the cycle.
	CodeDependencyCycle HaltCode = "dependency_cycle"
	// Waves (a capsule waiting for its wave's capacity at AUTOMATED_GATES).
	CodeWaveClosed HaltCode = "wave_closed"
	// Any phase: a value of the capsule's state in one of sagad's buckets
	// (its checkpoint, kept bytes, budget or wave record) is not one sagad
	// wrote. The detail names the bucket.
	CodeStateCorrupt HaltCode = "state_corrupt"
	// CodeWaveNotAdmitted: the capsule's producer is not one its wave
	// admits (sagactl wave set --producers), at AUTOMATED_GATES.
	CodeWaveNotAdmitted HaltCode = "wave_not_admitted"
	// CodeDeadlineExceeded: the capsule's deadline passed before it was
	// done: while it waited, was paused or waited for an operator (the
	// sweeper), or right before an agent call. The detail names the phase
	// it stood at.
	CodeDeadlineExceeded HaltCode = "deadline_exceeded"
	// CodeChildLimitExceeded: a child went over a limit its parent's
	// budget.child sets: "attempts" (the EXECUTION agent call that would
	// be one more than max_attempts) or "wall_time" (max_wall_time from
	// its reception passed, where a deadline would have halted it). Not
	// in PIPELINE §3's table (docs/DELEGATION.md "Child limits").
	CodeChildLimitExceeded HaltCode = "child_limit_exceeded"
)

// HaltCodes lists every halt code, the closed set metrics may label with.
var HaltCodes = []HaltCode{
	CodeSchemaInvalid, CodeIntegrityMismatch, CodeDeadlineInPast, CodeBudgetTokensNonPositive,
	CodeBudgetDollarsNonPositive, CodeLockUnavailable, CodeCapsuleLimitsExceeded, CodeNotJSON, CodeCapsuleTooLarge, CodeUnsupportedSchemaVersion,
	CodeContextRefMissing, CodeTargetMissing, CodeSpecNotApproved,
	CodeAbsoluteRulesViolated, CodeLockAcquisitionFailed, CodeBudgetExceeded, CodeExecutorFailed,
	CodeReviewRejectedTerminal, CodeMaxCyclesExceeded,
	CodeOperatorRejected, CodeDependencyFailed, CodeDependencyMissing, CodeWaveClosed, CodeStateCorrupt,
	CodeChainMembershipRefused, CodeWaveNotAdmitted, CodeDependencyCycle, CodeDeadlineExceeded, CodeDepthExceeded, CodeParentRefused,
	CodeModelNotAllowed, CodeChildLimitExceeded,
}

// HaltReason is a typed halt reason. Its String form is the exact text of
// PIPELINE §3: the code alone, or "code:detail".
type HaltReason struct {
	Code   HaltCode
	Detail string
}

// String returns "code" or "code:detail".
func (h HaltReason) String() string {
	if h.Detail == "" {
		return string(h.Code)
	}
	return string(h.Code) + ":" + h.Detail
}

// IsZero reports whether h is the empty reason.
func (h HaltReason) IsZero() bool { return h.Code == "" }

// ParseHaltReason splits a reason string into code and detail.
func ParseHaltReason(s string) HaltReason {
	code, detail, _ := strings.Cut(s, ":")
	return HaltReason{Code: HaltCode(code), Detail: detail}
}

// bracketList renders items as "[a, b, c]", the list form PIPELINE §3 uses.
func bracketList(items []string) string {
	return "[" + strings.Join(items, ", ") + "]"
}

// MaxSchemaPointers is the most JSON pointers a schema_invalid reason names.
const MaxSchemaPointers = 32

// maxPointer bounds one pointer of a schema_invalid reason, in bytes (a
// member name can be as long as the capsule).
const maxPointer = 256

// SchemaInvalid names the JSON pointers at fault, sorted and de-duplicated:
// the first [MaxSchemaPointers], each cut to 256 bytes, then "+N more" when
// there are others ("/a,/b,+3 more").
func SchemaInvalid(pointers []string) HaltReason {
	p := append([]string(nil), pointers...)
	sort.Strings(p)
	out := p[:0]
	for i, s := range p {
		if s == "" {
			s = "/"
		}
		if i > 0 && s == out[len(out)-1] {
			continue
		}
		out = append(out, s)
	}
	more := 0
	if len(out) > MaxSchemaPointers {
		more, out = len(out)-MaxSchemaPointers, out[:MaxSchemaPointers]
	}
	for i := range out {
		out[i] = Truncate(out[i], maxPointer)
	}
	if more > 0 {
		out = append(out, "+"+strconv.Itoa(more)+" more")
	}
	return HaltReason{CodeSchemaInvalid, strings.Join(out, ",")}
}

// IntegrityMismatch: the integrity digest does not match the content.
func IntegrityMismatch() HaltReason { return HaltReason{Code: CodeIntegrityMismatch} }

// DeadlineInPast: the capsule arrived after its deadline.
func DeadlineInPast() HaltReason { return HaltReason{Code: CodeDeadlineInPast} }

// BudgetTokensNonPositive: budget.tokens ≤ 0.
func BudgetTokensNonPositive() HaltReason { return HaltReason{Code: CodeBudgetTokensNonPositive} }

// BudgetDollarsNonPositive: budget.dollars ≤ 0. A capsule with no money to
// spend could only halt budget_exceeded after its first call had spent some.
func BudgetDollarsNonPositive() HaltReason { return HaltReason{Code: CodeBudgetDollarsNonPositive} }

// ModelNotAllowed: task.model is a tier or model id the models config does
// not list. The detail is the name, cut to 128 bytes (the schema's bound).
func ModelNotAllowed(model string) HaltReason {
	if len(model) > 128 {
		model = strings.ToValidUTF8(model[:128], "")
	}
	return HaltReason{Code: CodeModelNotAllowed, Detail: model}
}

// LockUnavailable: a required lock is held by another capsule at reception.
func LockUnavailable(path string) HaltReason {
	return HaltReason{CodeLockUnavailable, Truncate(path, MaxReasonDetail)}
}

// ChainMembershipRefused names the chain and step a capsule declared
// without sagad having assigned it that step: "chain_membership_refused:
// <chain id>/<step>".
func ChainMembershipRefused(chainID string, step int) HaltReason {
	return HaltReason{CodeChainMembershipRefused, Truncate(chainID, MaxReasonDetail-12) + "/" + strconv.Itoa(step)}
}

// StepIDRefused: a capsule that declares no chain step came under a
// capsule id sagad assigned to a composition step (held, gated, published
// or not): "chain_membership_refused", with no detail, as the chain may be
// another producer's. Only sagad's own bytes for the step take its id.
func StepIDRefused() HaltReason { return HaltReason{Code: CodeChainMembershipRefused} }

// DepthExceeded names the depth a child capsule would have had:
// "depth_exceeded:<depth>".
func DepthExceeded(depth int) HaltReason {
	return HaltReason{CodeDepthExceeded, strconv.Itoa(depth)}
}

// ParentRefused names the parent a capsule claimed without the token of a
// call that parent has in flight: "parent_refused:<parent id>".
func ParentRefused(parentID string) HaltReason {
	return HaltReason{CodeParentRefused, Truncate(parentID, MaxReasonDetail)}
}

// WaveNotAdmitted names the wave that does not admit the capsule's
// producer.
func WaveNotAdmitted(waveID string) HaltReason {
	return HaltReason{CodeWaveNotAdmitted, Truncate(waveID, MaxReasonDetail)}
}

// DeadlineExceeded names the phase the capsule stood at when its deadline
// passed, e.g. "deadline_exceeded:EXECUTION": no agent call starts after
// the deadline.
func DeadlineExceeded(phase Phase) HaltReason {
	return HaltReason{CodeDeadlineExceeded, phase.String()}
}

// The limits of budget.child a child can exceed.
const (
	ChildLimitAttempts = "attempts"
	ChildLimitWallTime = "wall_time"
)

// ChildLimitExceeded names the limit of its parent's budget.child the child
// went over: [ChildLimitAttempts] or [ChildLimitWallTime].
func ChildLimitExceeded(limit string) HaltReason {
	return HaltReason{CodeChildLimitExceeded, limit}
}

// NotJSON: the intake bytes are not a JSON object.
func NotJSON() HaltReason { return HaltReason{Code: CodeNotJSON} }

// CapsuleTooLarge: the intake bytes exceed the hard intake limit.
func CapsuleTooLarge(size int) HaltReason {
	return HaltReason{CodeCapsuleTooLarge, strconv.Itoa(size)}
}

// UnsupportedSchemaVersion: schema_version's major is not supported.
func UnsupportedSchemaVersion(v string) HaltReason {
	return HaltReason{CodeUnsupportedSchemaVersion, Truncate(v, MaxReasonDetail)}
}

// CapsuleLimitsExceeded names the first list over its hard limit, e.g.
// "capsule_limits_exceeded:depends_on".
func CapsuleLimitsExceeded(field string) HaltReason {
	return HaltReason{CodeCapsuleLimitsExceeded, field}
}

// ContextRefMissing names the first context ref that does not resolve.
func ContextRefMissing(ref string) HaltReason {
	return HaltReason{CodeContextRefMissing, Truncate(ref, MaxReasonDetail)}
}

// TargetMissing names the target that does not resolve.
func TargetMissing(ref string) HaltReason {
	return HaltReason{CodeTargetMissing, Truncate(ref, MaxReasonDetail)}
}

// SpecNotApproved lists every missing or unsatisfied spec field.
func SpecNotApproved(missing []string) HaltReason {
	return HaltReason{CodeSpecNotApproved, bracketList(missing)}
}

// AbsoluteRulesViolated lists every violated rule number, ascending.
func AbsoluteRulesViolated(rules []int) HaltReason {
	r := append([]int(nil), rules...)
	sort.Ints(r)
	items := make([]string, 0, len(r))
	for i, n := range r {
		if i > 0 && n == r[i-1] {
			continue
		}
		items = append(items, strconv.Itoa(n))
	}
	return HaltReason{CodeAbsoluteRulesViolated, bracketList(items)}
}

// LockAcquisitionFailed names the lock path EXECUTION could not take.
func LockAcquisitionFailed(path string) HaltReason {
	return HaltReason{CodeLockAcquisitionFailed, Truncate(path, MaxReasonDetail)}
}

// Budget exceeded reasons (Rule 16).
const (
	BudgetTokens      = "tokens"
	BudgetDollars     = "dollars"
	BudgetWaveTokens  = "wave_tokens"
	BudgetWaveDollars = "wave_dollars"
	// BudgetParentTokens and BudgetParentDollars: a child capsule's spend
	// took an ancestor's own spend plus its descendants' over the
	// ancestor's cap (parent_capsule_id).
	BudgetParentTokens  = "parent_tokens"
	BudgetParentDollars = "parent_dollars"
)

// BudgetExceeded names the cap that was crossed: tokens, dollars, wave_tokens or wave_dollars.
func BudgetExceeded(which string) HaltReason { return HaltReason{CodeBudgetExceeded, which} }

// ExecutorFailed carries the executor's failure detail, cut to
// [MaxReasonDetail] bytes: it is a worker's text.
func ExecutorFailed(detail string) HaltReason {
	return HaltReason{CodeExecutorFailed, Truncate(detail, MaxReasonDetail)}
}

// ReviewRejectedTerminal: the reviewer (or Rule 15) rejected the artifact.
func ReviewRejectedTerminal() HaltReason { return HaltReason{Code: CodeReviewRejectedTerminal} }

// MaxCyclesExceeded: the cycle limit was used without an approval.
func MaxCyclesExceeded(limit int) HaltReason {
	return HaltReason{CodeMaxCyclesExceeded, strconv.Itoa(limit)}
}

// OperatorRejected: an operator rejected the capsule at the operator gate.
func OperatorRejected() HaltReason { return HaltReason{Code: CodeOperatorRejected} }

// DependencyFailed names a dependency that halted or was cancelled.
func DependencyFailed(id string) HaltReason { return HaltReason{CodeDependencyFailed, id} }

// DependencyMissing names a dependency still unknown after the wait allowed.
func DependencyMissing(id string) HaltReason { return HaltReason{CodeDependencyMissing, id} }

// MaxCycleIDs is the most capsule ids a dependency_cycle reason names
// (ids of 36 bytes stay within [MaxReasonDetail]).
const MaxCycleIDs = 24

// DependencyCycle names the capsules of a dependency cycle, sorted and
// comma-separated, the first [MaxCycleIDs] then "+N more": every member
// halts with the same reason, whichever is found first.
func DependencyCycle(ids []string) HaltReason {
	l := slices.Clone(ids)
	slices.Sort(l)
	l = slices.Compact(l)
	more := 0
	if len(l) > MaxCycleIDs {
		more, l = len(l)-MaxCycleIDs, l[:MaxCycleIDs]
	}
	for i := range l {
		l[i] = Truncate(l[i], 40)
	}
	if more > 0 {
		l = append(l, "+"+strconv.Itoa(more)+" more")
	}
	return HaltReason{CodeDependencyCycle, strings.Join(l, ",")}
}

// WaveClosed names the wave that was closed while the capsule waited for
// (or was being admitted to) its capacity.
func WaveClosed(waveID string) HaltReason {
	return HaltReason{CodeWaveClosed, Truncate(waveID, MaxReasonDetail)}
}

// StateCorrupt names the bucket holding a value of the capsule's state that
// sagad did not write (e.g. "state_corrupt:SAGA_CHECKPOINTS").
func StateCorrupt(bucket string) HaltReason { return HaltReason{CodeStateCorrupt, bucket} }
