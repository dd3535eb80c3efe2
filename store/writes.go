package store

import (
	"context"

	"github.com/sagad/sagad/internal/jspub"
)

// setWrites makes w the policy of every write the store makes (see
// internal/jspub.Writes); the locks and budget buckets get theirs through
// their own configs.
func (s *Store) setWrites(w *jspub.Writes) {
	s.Checkpoints.w = w
	s.Continuations.w = w
	s.Artifacts.w = w
}

// writes is the policy of the store's own writes (capsule bytes, phase
// messages, events, outcomes).
func (s *Store) writes() *jspub.Writes { return s.Checkpoints.w }

// readCtx bounds one read (jspub.ReadCtx).
func readCtx(ctx context.Context, w *jspub.Writes) (context.Context, context.CancelFunc) {
	return jspub.ReadCtx(ctx, w)
}
