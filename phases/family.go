package phases

import (
	"context"
	"fmt"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
)

// admitToFamily is the last step of AUTOMATED_GATES for a child capsule
// (parent_capsule_id), after its wave admitted it and before anything is
// spent: its caps (raised by any override) are reserved at its parent
// (package budget's tree.go), whose own hold at its parent covers them, so
// that no interleaving of a tree's children spends past an ancestor's
// caps. A child that does not fit halts budget_exceeded:parent_tokens (or
// parent_dollars) before any call, with a finding saying what the parent
// has left, or, with env.ChildWait, waits (trigger parent_capacity) until
// the sweeper finds room for it; one whose parent ended meanwhile halts
// parent_refused.
func admitToFamily(ctx context.Context, env *Env, in *Input, next Decision) Decision {
	if next.Action != Advance || in.Checkpoint == nil || in.Checkpoint.Parent == "" {
		return next
	}
	ab, ok := env.Budgets.(AncestorBudgets)
	if !ok {
		return next
	}
	caps := in.Checkpoint.State.Caps(in.Capsule.Budget)
	a, err := ab.ReserveChild(ctx, in.Checkpoint.Parent, in.Key(), caps)
	if err != nil {
		return RetryLater(fmt.Errorf("automated gates: reserve under parent %s: %w", in.Checkpoint.Parent, err))
	}
	switch {
	case a.Admitted:
		return next
	case a.ParentEnded:
		return HaltWith(capsule.ParentRefused(in.Checkpoint.Parent), capsule.Finding{
			Field: "parent_capsule_id", Message: "the parent ended before the child was admitted: its budget admits no child any more",
		})
	}
	reason := FamilyWaitReason(in.Checkpoint.Parent, a.Family, caps)
	if env.ChildWait && a.Family.CouldFit(caps) {
		return Decision{Action: Park, Trigger: capsule.TriggerParentCapacity, WaitFor: []string{in.Checkpoint.Parent}, Reason: reason}
	}
	if env.ChildWait {
		reason += ": more than the parent's whole caps, so no sibling's end makes room"
	}
	return HaltWith(capsule.BudgetExceeded(a.Exceeded), capsule.Finding{Field: "parent_capsule_id", Message: reason})
}

// FamilyWaitReason says why a child with caps does not fit the caps of
// its parent, whose family record is f.
func FamilyWaitReason(parent string, f budget.Family, caps capsule.Budget) string {
	c := f.Committed()
	s := fmt.Sprintf("parent %s has", parent)
	if f.Caps.Tokens > 0 {
		s += fmt.Sprintf(" %d of %d tokens", max(f.Caps.Tokens-c.Tokens, 0), f.Caps.Tokens)
	}
	if f.Caps.Dollars > 0 {
		if f.Caps.Tokens > 0 {
			s += " and"
		}
		s += fmt.Sprintf(" %g of %g dollars", max(f.Caps.Dollars-c.Dollars, 0), f.Caps.Dollars)
	}
	return s + fmt.Sprintf(" left (its own spend, its descendants' and its children's reservations counted); the child's caps are %d tokens and %g dollars", caps.Tokens, caps.Dollars)
}
