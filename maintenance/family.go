package maintenance

import (
	"context"
	"errors"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
)

// parentCapacity resumes a child capsule waiting for room in its parent's
// caps (trigger parent_capacity) once its parent's family record, as read,
// has room for its caps, or once waiting is pointless: the parent ended, or
// what the tree spent already leaves no room whatever its siblings release.
// AUTOMATED_GATES then decides again (reserves, waits again when a sibling
// took the room first, or halts), so a resume on a stale read costs one
// phase run, never a reservation past the caps.
func (w *Sweeper) parentCapacity(ctx context.Context, cp *capsule.Checkpoint) {
	if w.st.Budgets == nil || cp.Parent == "" {
		return
	}
	_, c, err := w.st.Raw(ctx, cp.Key)
	if err != nil || c == nil {
		return
	}
	fam, _, err := w.st.Budgets.FamilyOf(ctx, cp.Parent)
	if err != nil {
		w.log.Warn("sweep: read a parent's family record", "key", cp.Key, "parent", cp.Parent, "error", err)
		return
	}
	caps := cp.State.Caps(c.Budget)
	if !fam.Ended && !fam.Fits(caps) && fam.CouldFit(caps) {
		return
	}
	if _, err := w.admin.ResumeWaiting(ctx, cp.Key, admin.ResumeOptions{By: capsule.BySagad, Reason: "its parent has room"}); err != nil && !errors.Is(err, admin.ErrRefused) {
		w.log.Warn("sweep: resume a child its parent has room for", "key", cp.Key, "error", err)
	}
}
