package store

import (
	"context"
	"fmt"

	"github.com/sagad/sagad/capsule"
)

// releaseWave releases what is left of an ended wave capsule's reservation
// in its wave (budget.Tracker.Release), part of the effects of its end.
// Every ending goes through Emit — a phase's halt or HANDOFF's completion,
// an operator's cancel, the sweeper's halts — and re-emitting it is
// harmless: the reservation is released once. It is tried even when the
// checkpoint records no reservation: a delivery of AUTOMATED_GATES that
// reserved and then lost to the end (a cancel, a closed wave's Rule 19) left
// one there, unrecorded.
func (s *Store) releaseWave(ctx context.Context, cp *capsule.Checkpoint) error {
	if cp.WaveID == "" || s.Budgets == nil {
		return nil
	}
	_, released, err := s.Budgets.Release(ctx, cp.WaveID, cp.Key)
	if err != nil {
		return fmt.Errorf("release the wave reservation of %s: %w", cp.Key, err)
	}
	if released {
		s.WaveChanged()
	}
	return nil
}

// releaseFamily releases what is left of an ended child capsule's
// reservation at its parent and every ancestor above it
// (budget.Tracker.ReleaseChild), part of the effects of its end, as
// releaseWave is: once, however often the end is emitted, and tried even
// when no reservation was made (a child halted before AUTOMATED_GATES
// holds none, and costs a read per ancestor).
func (s *Store) releaseFamily(ctx context.Context, cp *capsule.Checkpoint) error {
	if cp.Parent == "" || s.Budgets == nil {
		return nil
	}
	released, err := s.Budgets.ReleaseChild(ctx, cp.Parent, cp.Key)
	if err != nil {
		return fmt.Errorf("release the family reservation of %s: %w", cp.Key, err)
	}
	if released {
		s.WaveChanged() // a sibling waiting for room may fit now
	}
	return nil
}

// OnWaveChange sets f to be called (without blocking the caller for long)
// whenever this process released a wave reservation or changed a wave:
// sagad wakes its sweeper with it, so a capsule waiting for room goes on at
// once rather than at the next sweep. Other processes' changes are seen at
// their sweeps.
func (s *Store) OnWaveChange(f func()) { s.waveHook.Store(&f) }

// WaveChanged calls the function set by OnWaveChange, if any.
func (s *Store) WaveChanged() {
	if f := s.waveHook.Load(); f != nil && *f != nil {
		(*f)()
	}
}
