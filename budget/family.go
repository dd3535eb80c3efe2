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
	// Caps are the parent's caps when its first child was received.
	Caps capsule.Budget
	// Used is what its descendants spent in total (its own spend is in
	// its checkpoint).
	Used capsule.Usage
	// Parent is the parent's own parent ("" for a root capsule).
	Parent string
	// Children are the first [MaxChildrenListed] children, in the order
	// they were received; More counts the others.
	Children []string
	More     int
}

func familyKey(parent string) string { return "parent." + parent }

func (r record) family() Family {
	return Family{Caps: capsule.Budget{Tokens: r.TokensCap, Dollars: r.DollarsCap}, Used: r.Used,
		Parent: r.Parent, Children: slices.Clone(r.Children), More: r.ChildrenMore}
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
		if r.TokensCap == 0 && r.DollarsCap == 0 {
			r.TokensCap, r.DollarsCap, r.Parent = caps.Tokens, caps.Dollars, grandparent
		}
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

// ChargeDescendant adds u, spent by a descendant of ancestor, to
// ancestor's family total once per chargeID, and returns the family as it
// stands.
func (t *Tracker) ChargeDescendant(ctx context.Context, ancestor, chargeID string, u capsule.Usage) (Family, error) {
	if err := u.Validate(); err != nil {
		return Family{}, fmt.Errorf("budget: charge %s to %s: %w", chargeID, ancestor, err)
	}
	r, err := t.update(ctx, familyKey(ancestor), func(r *record) bool {
		return r.applyWindow(chargeID, u, descendantWindow)
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
