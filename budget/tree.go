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
// reserves its caps against every ancestor before anything is spent
// ([Tracker.ReserveChild], at AUTOMATED_GATES), as a wave capsule reserves
// against its wave: each ancestor's family record admits it only if
//
//	own + descendants' spend + reserved + the child's caps ≤ cap
//
// per capped dimension, in one compare-and-set of that record. Each charge
// of the child then moves what it spent from its reservation to the
// ancestor's total ([Tracker.ChargeDescendant]), and its end releases what
// is left ([Tracker.ReleaseChild]). The parent's own spend is charged into
// its record too ([Tracker.ChargeOwn]), so admission reads it with the
// reservations, not from a checkpoint that may lag.
//
// A descendant holds its caps at every ancestor, not only at its parent: a
// grandchild's reservation is counted at the root beside its parent's. That
// counts a subtree's room twice at the upper ancestors (conservative: it
// may refuse a child that would have fitted, never admit one that does
// not), and it keeps every ancestor's check independent of the others:
// a child ending before its own children releases only its own hold.
//
// The bound holds as far as each capsule stays within its own caps: a
// call's usage is known only once it returns, and the call that crosses a
// capsule's cap is charged (it happened) before the capsule halts.

// maxAncestors bounds a walk up a tree: --max-depth bounds it first; this
// only guards against a record naming a cycle (sagad never writes one).
const maxAncestors = 64

// ChildAdmission is the outcome of [Tracker.ReserveChild].
type ChildAdmission struct {
	// Admitted: the child holds a reservation at every ancestor.
	Admitted bool
	// Ancestor is the first ancestor, from the parent up, whose caps have
	// no room for the child, and Exceeded names the dimension
	// ([capsule.BudgetParentTokens] or [capsule.BudgetParentDollars]);
	// both "" when admitted.
	Ancestor, Exceeded string
	// Family is that ancestor's record as the refusal saw it.
	Family Family
}

// ErrNoFamily refuses a reservation under a parent that has no family
// record: RECEPTION links every child (AddChild) before it can be admitted.
var ErrNoFamily = errors.New("budget: the parent has no family record")

// ReserveChild reserves caps for holder (the child's checkpoint key) at
// parent and at every ancestor above it, parent first. A holder that holds
// a reservation at an ancestor already keeps it (a redelivery, or a racing
// sagad). If one ancestor has no room, the holds this call took are
// released and the refusal names that ancestor; those it found already
// held are released too, so a refused child holds nothing.
func (t *Tracker) ReserveChild(ctx context.Context, parent, holder string, caps capsule.Budget) (ChildAdmission, error) {
	if parent == "" || holder == "" || caps.Tokens < 0 || !(caps.Dollars >= 0) {
		return ChildAdmission{}, fmt.Errorf("budget: reserve %q under %q: invalid", holder, parent)
	}
	hold := capsule.Usage{Tokens: caps.Tokens, Dollars: caps.Dollars}
	var held []string
	for a, n := parent, 0; a != "" && n < maxAncestors; n++ {
		var fits, known bool
		r, err := t.update(ctx, familyKey(a), func(r *record) bool {
			fits, known = true, r.TokensCap != 0 || r.DollarsCap != 0 || len(r.Children) > 0 || r.ChildrenMore > 0
			if _, ok := r.Holds[holder]; ok {
				return false
			}
			if fits = r.family().Fits(caps); !fits {
				return false
			}
			if r.Holds == nil {
				r.Holds = map[string]capsule.Usage{}
			}
			r.Holds[holder] = hold
			r.Reserved = r.Reserved.Add(hold)
			return true
		})
		if err == nil && !known && a == parent {
			err = ErrNoFamily
		}
		if err != nil {
			return ChildAdmission{}, errors.Join(fmt.Errorf("budget: reserve %s under %s: %w", holder, a, err), t.releaseAt(ctx, held, holder))
		}
		if !fits {
			f := r.family()
			if err := t.releaseAt(ctx, held, holder); err != nil {
				return ChildAdmission{}, err
			}
			return ChildAdmission{Ancestor: a, Exceeded: f.over(caps), Family: f}, nil
		}
		held = append(held, a)
		a = r.Parent
	}
	return ChildAdmission{Admitted: true}, nil
}

// ReleaseChild releases what is left of holder's reservation at parent and
// at every ancestor above it, and reports whether any was held. Releasing
// again is harmless: nothing is held, nothing is written.
func (t *Tracker) ReleaseChild(ctx context.Context, parent, holder string) (bool, error) {
	released := false
	for a, n := parent, 0; a != "" && n < maxAncestors; n++ {
		var had bool
		r, err := t.update(ctx, familyKey(a), func(r *record) bool {
			had = r.dropHold(holder)
			return had
		})
		if err != nil {
			return released, fmt.Errorf("budget: release %s under %s: %w", holder, a, err)
		}
		released = released || had
		a = r.Parent
	}
	return released, nil
}

// releaseAt releases holder's holds at the ancestors named.
func (t *Tracker) releaseAt(ctx context.Context, ancestors []string, holder string) error {
	for _, a := range ancestors {
		if _, err := t.update(ctx, familyKey(a), func(r *record) bool { return r.dropHold(holder) }); err != nil {
			return fmt.Errorf("budget: release %s under %s: %w", holder, a, err)
		}
	}
	return nil
}

// dropHold removes holder's hold from r, reporting whether it had one.
func (r *record) dropHold(holder string) bool {
	h, ok := r.Holds[holder]
	if !ok {
		return false
	}
	delete(r.Holds, holder)
	r.Reserved = subFloor(r.Reserved, h)
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
