package store

import (
	"context"
	"errors"
	"time"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/cas"
	"github.com/sagad/sagad/machine"
)

// Apply is the one way a checkpoint changes once written: it applies ev to
// the checkpoint of key at now and writes the result with a compare-and-set
// under sagad's one retry policy (cas.Retry). On a conflict the checkpoint is
// read again from the stream's leader and ev applied again, so the machine
// judges ev against the checkpoint actually written. An event that changes
// nothing writes nothing.
func (s *Store) Apply(ctx context.Context, key string, ev machine.Event, now time.Time) (machine.Result, error) {
	return s.ApplyWith(ctx, key, ev, now, ApplyHooks{})
}

// ApplyHooks let a caller that holds a checkpoint (a delivery working on one
// capsule) take part in [Store.ApplyWith]. Every field is optional.
type ApplyHooks struct {
	// Read returns the checkpoint to apply the event to and its revision.
	// Defaults to reading the latest from the stream's leader.
	Read func(ctx context.Context) (*capsule.Checkpoint, uint64, error)
	// Conflict is called when a write lost its compare-and-set. Returning
	// cas.ErrConflict applies the event again (to what Read then returns);
	// any other error ends the apply with it. Defaults to cas.ErrConflict.
	Conflict func(ctx context.Context) error
	// Wrote is told each checkpoint written and its new revision.
	Wrote func(cp *capsule.Checkpoint, rev uint64)
}

// ApplyWith is [Store.Apply] with hooks.
func (s *Store) ApplyWith(ctx context.Context, key string, ev machine.Event, now time.Time, h ApplyHooks) (machine.Result, error) {
	if h.Read == nil {
		h.Read = func(ctx context.Context) (*capsule.Checkpoint, uint64, error) {
			return s.Checkpoints.GetLatest(ctx, key, nil)
		}
	}
	var res machine.Result
	err := cas.Retry(ctx, func(ctx context.Context) error {
		cp, rev, err := h.Read(ctx)
		if err != nil {
			return err
		}
		r, err := machine.Apply(cp, ev, now)
		if err != nil {
			return err
		}
		if !r.Changed {
			res = r
			return nil
		}
		n, err := s.Checkpoints.update(ctx, r.Checkpoint, rev)
		if errors.Is(err, ErrConflict) {
			if h.Conflict != nil {
				return h.Conflict(ctx)
			}
			return cas.ErrConflict
		}
		if err != nil {
			return err
		}
		if h.Wrote != nil {
			h.Wrote(r.Checkpoint, n)
		}
		res = r
		return nil
	})
	return res, err
}

// Replace writes over the checkpoint of fresh's key at revision rev, one
// sagad did not write (package corrupt), the fresh checkpoint with ev
// applied at now. It does not retry: ErrConflict says the key was written
// meanwhile, and that value decides.
func (s *Store) Replace(ctx context.Context, fresh *capsule.Checkpoint, rev uint64, ev machine.Event, now time.Time) (machine.Result, uint64, error) {
	res, err := machine.Apply(fresh, ev, now)
	if err != nil {
		return machine.Result{}, 0, err
	}
	n, err := s.Checkpoints.update(ctx, res.Checkpoint, rev)
	if err != nil {
		return machine.Result{}, 0, err
	}
	return res, n, nil
}

// ReplaceCorrupt writes cp as it is over the value at revision rev under
// its key, one sagad did not write (package corrupt): RECEPTION's first
// checkpoint of a capsule whose key held such a value. It does not retry:
// ErrConflict says the key was written meanwhile, and that value decides.
func (s *Store) ReplaceCorrupt(ctx context.Context, cp *capsule.Checkpoint, rev uint64) (uint64, error) {
	return s.Checkpoints.update(ctx, cp, rev)
}

// WriteCaughtUp writes cp at revision rev: a checkpoint that a phase's
// catching up (pipeline's deferred advances) brought forward by
// machine.Apply, transition by transition, from the value at rev. It does
// not retry: ErrConflict says the key was written meanwhile, and the phase
// decides again on that value.
func (s *Store) WriteCaughtUp(ctx context.Context, cp *capsule.Checkpoint, rev uint64) (uint64, error) {
	return s.Checkpoints.update(ctx, cp, rev)
}
