package store

import (
	"context"

	"github.com/sagad/sagad/capsule"
)

// UpdateForTest is Checkpoints.update, for this package's external tests
// of the compare-and-set itself.
func (s *Checkpoints) UpdateForTest(ctx context.Context, cp *capsule.Checkpoint, rev uint64) (uint64, error) {
	return s.update(ctx, cp, rev)
}
