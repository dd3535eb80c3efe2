package budget

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/sagad/sagad/capsule"
)

// A delegation tree's budget (the family records of family.go, with
// reservations).
//
// A capsule's caps bound its own spend plus its descendants'. So that no
// interleaving of children can spend past an ancestor's caps, a child
// reserves its caps at its parent before anything is spent
// ([Tracker.ReserveChild], at AUTOMATED_GATES), as a wave capsule reserves
// in its wave: the parent's family record admits it only if
//
//	own + descendants' spend + reserved + the child's caps ≤ cap
//
// per capped dimension, in one compare-and-set. The hold stands for the
// child's whole subtree: a grandchild's reservation is taken out of the
// child's caps, which its hold at the parent already covers. Every spend in
// the subtree moves out of the hold of the parent's child it descends from,
// at every ancestor, from the root down ([Tracker.ChargeAncestors]). By
// induction the sum spent under any ancestor stays within its caps.
//
// When a child ends ([Tracker.ReleaseChild]) its record is marked ended
// (it admits no child any more: its calls are over) and its hold at its
// parent shrinks to what its own children still hold; each of those, when
// it ends, shrinks the holds of its ended ancestors in turn. That shrink is
// sound only because a charge reaches an ancestor before it reaches any
// record below it: what an ended child's children still hold then covers
// every charge of its subtree its parent has not counted yet. Charged from
// the spender up instead, a charge counted at the child (out of its
// child's hold) but not yet at the parent would be in neither the child's
// holds nor the parent's total, and the parent could admit a sibling into
// room that charge is about to take. The parent's
// own spend is charged into its record too ([Tracker.ChargeOwn]), so
// admission reads it in the same write as the reservations, not from a
// checkpoint that may lag.
//
// The bound holds as far as each capsule stays within its own caps: a
// call's usage is known only once it returns, and the call that crosses a
// capsule's cap is charged (it happened) before the capsule halts.

// maxAncestors bounds a walk up a tree: --max-depth bounds it first; this
// only guards against a record naming a cycle (sagad never writes one).
const maxAncestors = 64

// ChildAdmission is the outcome of [Tracker.ReserveChild].
type ChildAdmission struct {
	// Admitted: the child holds a reservation at its parent (made now, or
	// earlier).
	Admitted bool
	// ParentEnded: the parent ended before the child was admitted; it
	// admits no child any more.
	ParentEnded bool
	// Exceeded names the dimension the child does not fit in
	// ([capsule.BudgetParentTokens] or [capsule.BudgetParentDollars]); ""
	// when admitted or the parent ended.
	Exceeded string
	// Family is the parent's record as the decision saw it.
	Family Family
}

// ErrNoFamily refuses a reservation under a parent that has no family
// record: RECEPTION links every child (AddChild) before it can be admitted.
var ErrNoFamily = errors.New("budget: the parent has no family record")

// ReserveChild reserves caps for holder (the child's checkpoint key) at
// parent if they fit what parent's caps have left and parent has not
// ended. A holder that holds a reservation already is admitted again
// without a change (a redelivery, or a racing sagad).
func (t *Tracker) ReserveChild(ctx context.Context, parent, holder string, caps capsule.Budget) (ChildAdmission, error) {
	if parent == "" || holder == "" || caps.Tokens < 0 || !(caps.Dollars >= 0) {
		return ChildAdmission{}, fmt.Errorf("budget: reserve %q under %q: invalid", holder, parent)
	}
	var a ChildAdmission
	known := false
	r, err := t.update(ctx, familyKey(parent), func(r *record) bool {
		a = ChildAdmission{}
		known = r.TokensCap != 0 || r.DollarsCap != 0 || len(r.Children) > 0 || r.ChildrenMore > 0
		switch _, held := r.Holds[holder]; {
		case held:
			a.Admitted = true
			return false
		case !known:
			return false
		case r.Ended:
			a.ParentEnded = true
			return false
		case !r.family().Fits(caps):
			a.Exceeded = r.family().over(caps)
			return false
		}
		if r.Holds == nil {
			r.Holds = map[string]capsule.Usage{}
		}
		hold := capsule.Usage{Tokens: caps.Tokens, Dollars: caps.Dollars}
		r.Holds[holder] = hold
		r.Reserved = r.Reserved.Add(hold)
		a.Admitted = true
		return true
	})
	if err == nil && !known {
		err = ErrNoFamily
	}
	if err != nil {
		return ChildAdmission{}, fmt.Errorf("budget: reserve %s under %s: %w", holder, parent, err)
	}
	a.Family = r.family()
	return a, nil
}

// ReleaseChild ends child (a capsule whose parent is parent) in the tree:
// its family record is marked ended, so it admits no child any more, and
// its hold at parent shrinks to what its own children still hold; then
// each ended ancestor's hold at its own parent shrinks to what it still
// holds, up the tree. It reports whether any hold shrank. Releasing again
// is harmless: every step only ever shrinks a hold to a bound that never
// grows once its record is ended.
func (t *Tracker) ReleaseChild(ctx context.Context, parent, child string) (bool, error) {
	if parent == "" || child == "" {
		return false, errors.New("budget: release: empty capsule key")
	}
	own, err := t.update(ctx, familyKey(child), func(r *record) bool {
		if r.Ended {
			return false
		}
		r.Ended = true
		if r.Parent == "" {
			r.Parent = parent
		}
		return true
	})
	if err != nil {
		return false, fmt.Errorf("budget: end %s: %w", child, err)
	}
	released, keep := false, own.Reserved
	for a, h, n := parent, child, 0; a != "" && n < maxAncestors; n++ {
		var shrank, ended bool
		r, err := t.update(ctx, familyKey(a), func(r *record) bool {
			shrank, ended = r.shrinkHold(h, keep), r.Ended
			return shrank
		})
		if err != nil {
			return released, fmt.Errorf("budget: release %s under %s: %w", h, a, err)
		}
		released = released || shrank
		if !ended {
			break // a live parent's hold at its own parent is its caps
		}
		a, h, keep = r.Parent, a, r.Reserved
	}
	return released, nil
}

// shrinkHold lowers holder's hold to at most keep (removing it at zero),
// reporting whether it changed.
func (r *record) shrinkHold(holder string, keep capsule.Usage) bool {
	h, ok := r.Holds[holder]
	if !ok {
		return false
	}
	nh := capsule.Usage{Tokens: min(h.Tokens, keep.Tokens), Dollars: min(h.Dollars, keep.Dollars)}
	if nh == h && nh != (capsule.Usage{}) {
		return false // a hold spent down to nothing goes, still
	}
	r.Reserved = subFloor(r.Reserved, subFloor(h, nh))
	if nh == (capsule.Usage{}) {
		delete(r.Holds, holder)
	} else {
		r.Holds[holder] = nh
	}
	if len(r.Holds) == 0 {
		r.Holds, r.Reserved = nil, capsule.Usage{} // no float residue
	}
	return true
}

// ChargeOwn adds u, spent by capsule key itself (whose caps are caps and
// whose parent is parent, "" for a root), to its family record once per
// chargeID, making the record if it has none, and returns the family as it
// stands: so a child's admission counts the parent's own spend in the same
// compare-and-set as the other reservations.
func (t *Tracker) ChargeOwn(ctx context.Context, key, parent, chargeID string, caps capsule.Budget, u capsule.Usage) (Family, error) {
	if err := u.Validate(); err != nil {
		return Family{}, fmt.Errorf("budget: charge %s to %s: %w", chargeID, key, err)
	}
	id := "own." + chargeID
	r, err := t.update(ctx, familyKey(key), func(r *record) bool {
		changed := false
		if r.TokensCap == 0 && r.DollarsCap == 0 || r.Parent == "" && parent != "" {
			r.link(caps, parent)
			changed = true
		}
		if !slices.Contains(r.Applied, id) {
			r.Own = r.Own.Add(u)
			r.Applied = append(r.Applied, id)
			if n := len(r.Applied) - descendantWindow; n > 0 {
				r.Applied = r.Applied[n:]
			}
			changed = true
		}
		return changed
	})
	if err != nil {
		return Family{}, fmt.Errorf("budget: charge %s to %s: %w", chargeID, key, err)
	}
	return r.family(), nil
}

// AncestorCharge is one ancestor's family record as a charge by one of
// its descendants left it ([Tracker.ChargeAncestors]).
type AncestorCharge struct {
	// Ancestor is the ancestor's checkpoint key.
	Ancestor string
	Family   Family
}

// ChargeAncestors adds u, spent by holder (a capsule whose parent is
// parent), to the family record of parent and of every ancestor above it,
// once per chargeID, each time out of the hold there of the ancestor's
// child the spender descends from, and returns the records as the charge
// left them, parent first.
//
// The ancestors are charged from the root down, never from the spender
// up (see the comment at the top of this file): an ended capsule's hold at
// its parent is shrunk to what its own children hold, which covers a
// charge in flight only while the parent has counted every charge the
// child has. A charge interrupted part-way (a crash, a failed write) has
// reached a top part of the chain, where it is counted and out of the
// holds, and not the rest, where it is still held: the tree admits less
// until a redelivery completes it, never more.
func (t *Tracker) ChargeAncestors(ctx context.Context, parent, holder, chargeID string, u capsule.Usage) ([]AncestorCharge, error) {
	if parent == "" || holder == "" || chargeID == "" {
		return nil, errors.New("budget: charge ancestors: empty capsule key or charge id")
	}
	if err := u.Validate(); err != nil {
		return nil, fmt.Errorf("budget: charge %s to the ancestors of %s: %w", chargeID, holder, err)
	}
	var out []AncestorCharge
	for a, h := parent, holder; a != "" && len(out) < maxAncestors; {
		chain, err := t.ancestors(ctx, a, h, maxAncestors-len(out))
		if err != nil {
			return nil, err
		}
		part := make([]AncestorCharge, len(chain))
		for i := len(chain) - 1; i >= 0; i-- {
			fam, err := t.ChargeDescendant(ctx, chain[i].ancestor, chain[i].holder, chargeID, u)
			if err != nil {
				return nil, err
			}
			part[i] = AncestorCharge{Ancestor: chain[i].ancestor, Family: fam}
			if t.chargedAt != nil {
				t.chargedAt(chain[i].ancestor)
			}
		}
		out = append(out, part...)
		// The top's parent as its compare-and-set saw it: "" but when a
		// read of the chain was stale (a replica behind its leader), and
		// then the ancestors above it are charged too, late but once.
		top := part[len(part)-1]
		a, h = top.Family.Parent, top.Ancestor
	}
	return out, nil
}

// link is one step of a walk up a tree: ancestor's child holder is the
// one the walk came from.
type link struct{ ancestor, holder string }

// ancestors reads at most most links of the chain above holder, parent
// first. A record's parent is written with its first link and never
// changed, so a plain read finds it; a record that does not exist (yet)
// ends the chain, as a charge walking up would find it. A read a replica
// answers from behind its leader may end the chain early: ChargeAncestors
// goes on from the parent the top's write saw.
func (t *Tracker) ancestors(ctx context.Context, parent, holder string, most int) ([]link, error) {
	var chain []link
	for a, h := parent, holder; a != "" && len(chain) < most; {
		chain = append(chain, link{a, h})
		r, _, err := t.get(ctx, familyKey(a))
		if err != nil {
			return nil, fmt.Errorf("budget: the ancestors of %s: %w", holder, err)
		}
		a, h = r.Parent, a
	}
	return chain, nil
}
