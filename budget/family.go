package budget

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/sagad/sagad/capsule"
)

// A parent capsule's family record, under "parent.<parent key>" in the
// budget bucket, links it to its children (capsules published by its
// executor calls, parent_capsule_id) and totals what they and their own
// descendants spent. Its caps are the parent's, recorded when its first
// child is received; its Parent field is the parent's own parent, so a
// descendant's charge walks up to every ancestor.

// MaxChildrenListed is how many children a family record names; the rest
// are only counted, so the record stays one small KV value.
const MaxChildrenListed = 256

// descendantWindow is how many descendant charge ids a family record
// remembers: a parent's children charge it in any order, so its window is
// wider than a capsule's own.
const descendantWindow = 256

// Family is a parent capsule's family record.
type Family struct {
	// Caps are the parent's caps when its first child was received (or
	// its own first charge was recorded here).
	Caps capsule.Budget
	// Used is what its descendants spent in total (its own spend is in
	// its checkpoint, and mirrored in Own).
	Used capsule.Usage
	// Own is what the parent itself spent, as charged here by a capsule
	// whose executor may delegate ([Tracker.ChargeOwn]): admission reads
	// it in the same record as the reservations.
	Own capsule.Usage
	// Reserved is what its admitted descendants reserved and have not
	// spent (yet) ([Tracker.ReserveChild]); Holders counts them.
	Reserved capsule.Usage
	Holders  int
	// Ended: the parent ended; it admits no child any more.
	Ended bool
	// Parent is the parent's own parent ("" for a root capsule).
	Parent string
	// Children are the first [MaxChildrenListed] children, in the order
	// they were received; More counts the others.
	Children []string
	More     int
}

func familyKey(parent string) string { return "parent." + parent }

func (r record) family() Family {
	return Family{Caps: capsule.Budget{Tokens: r.TokensCap, Dollars: r.DollarsCap}, Used: r.Used, Own: r.Own,
		Reserved: r.Reserved, Holders: len(r.Holds), Ended: r.Ended,
		Parent: r.Parent, Children: slices.Clone(r.Children), More: r.ChildrenMore}
}

// Committed is what the family has spent or promised: the parent's own
// spend, its descendants' and what they hold reserved.
func (f Family) Committed() capsule.Usage { return f.Own.Add(f.Used).Add(f.Reserved) }

// Fits reports whether caps fit in what the parent's caps have left once
// everything committed is counted (a cap of 0 is none).
func (f Family) Fits(caps capsule.Budget) bool {
	c := f.Committed()
	if f.Caps.Tokens > 0 && c.Tokens+caps.Tokens > f.Caps.Tokens {
		return false
	}
	return f.Caps.Dollars <= 0 || c.Dollars+caps.Dollars <= f.Caps.Dollars+dollarSlack
}

// CouldFit reports whether caps fit the parent's caps once every
// reservation is released: what spent is spent, but siblings' ends may
// free what they held and did not spend.
func (f Family) CouldFit(caps capsule.Budget) bool {
	spent := f.Own.Add(f.Used)
	if f.Caps.Tokens > 0 && spent.Tokens+caps.Tokens > f.Caps.Tokens {
		return false
	}
	return f.Caps.Dollars <= 0 || spent.Dollars+caps.Dollars <= f.Caps.Dollars+dollarSlack
}

// over names the dimension in which caps do not fit f, as a child's
// reason: parent_tokens before parent_dollars.
func (f Family) over(caps capsule.Budget) string {
	c := f.Committed()
	if f.Caps.Tokens > 0 && c.Tokens+caps.Tokens > f.Caps.Tokens {
		return capsule.BudgetParentTokens
	}
	return capsule.BudgetParentDollars
}

// AddChild links child to parent, whose caps are caps and whose own
// parent is grandparent (""), once: adding the same child again changes
// nothing.
func (t *Tracker) AddChild(ctx context.Context, parent, grandparent, child string, caps capsule.Budget) error {
	if parent == "" || child == "" {
		return errors.New("budget: add child: empty capsule key")
	}
	_, err := t.update(ctx, familyKey(parent), func(r *record) bool {
		if slices.Contains(r.Children, child) || slices.Contains(r.Applied, "child."+child) {
			return false
		}
		r.link(caps, grandparent)
		if len(r.Children) < MaxChildrenListed {
			r.Children = append(r.Children, child)
		} else {
			// Remembered as a charge of nothing, so a redelivery does not
			// count it twice (within the window).
			r.ChildrenMore++
			r.applyWindow("child."+child, capsule.Usage{}, descendantWindow)
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("budget: add child %s to %s: %w", child, parent, err)
	}
	return nil
}

// link records, on the first of a family record's writes that knows
// them, the parent's caps and its own parent. A record made by an own
// charge of a root capsule has no parent; one made by a child's link
// knows it.
func (r *record) link(caps capsule.Budget, parent string) {
	if r.TokensCap == 0 && r.DollarsCap == 0 {
		r.TokensCap, r.DollarsCap = caps.Tokens, caps.Dollars
	}
	if r.Parent == "" {
		r.Parent = parent
	}
}

// ChargeDescendant adds u, spent by holder, a descendant of ancestor, to
// ancestor's family total once per chargeID, moving it out of holder's
// reservation there in the same write, and returns the family as it
// stands. It writes one record: a descendant's charge goes to all its
// ancestors through [Tracker.ChargeAncestors], whose order the tree's
// bound relies on.
func (t *Tracker) ChargeDescendant(ctx context.Context, ancestor, holder, chargeID string, u capsule.Usage) (Family, error) {
	if err := u.Validate(); err != nil {
		return Family{}, fmt.Errorf("budget: charge %s to %s: %w", chargeID, ancestor, err)
	}
	r, err := t.update(ctx, familyKey(ancestor), func(r *record) bool {
		if !r.applyWindow(chargeID, u, descendantWindow) {
			return false
		}
		r.consumeHold(holder, u)
		return true
	})
	if err != nil {
		return Family{}, fmt.Errorf("budget: charge %s to %s: %w", chargeID, ancestor, err)
	}
	return r.family(), nil
}

// FamilyOf returns parent's family record; ok is false when it has no
// child.
func (t *Tracker) FamilyOf(ctx context.Context, parent string) (f Family, ok bool, err error) {
	r, rev, err := t.get(ctx, familyKey(parent))
	if err != nil {
		return Family{}, false, fmt.Errorf("budget: family of %s: %w", parent, err)
	}
	return r.family(), rev != 0, nil
}
