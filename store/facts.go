package store

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/rules"
)

// facts answers the constitution's questions about the live pipeline.
type facts struct {
	checkpoints *Checkpoints
	capsules    jetstream.KeyValue
	budgets     *budget.Tracker
}

var _ rules.Facts = (*facts)(nil)

// IDConflict: the id is owned by a capsule with a different digest.
func (f *facts) IDConflict(ctx context.Context, id, digest string) (bool, error) {
	if !ValidKey(id) {
		return false, nil
	}
	rctx, cancel := jspub.ReadCtx(ctx, nil)
	e, err := f.capsules.Get(rctx, id)
	cancel()
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	d, err := capsule.Digest(e.Value())
	if err != nil {
		return true, nil
	}
	return d != digest, nil
}

func (f *facts) Wave(ctx context.Context, waveID string) (rules.WaveInfo, bool, error) {
	w, ok, err := f.budgets.Wave(ctx, waveID)
	if err != nil || !ok {
		return rules.WaveInfo{}, ok, err
	}
	return rules.WaveInfo{Closed: w.Closed, TokensCap: w.TokensCap, DollarsCap: w.DollarsCap, Used: w.Used}, true, nil
}

func (f *facts) DependencyDone(ctx context.Context, id string) (bool, error) {
	if !ValidKey(id) {
		return false, nil
	}
	cp, _, err := f.checkpoints.Get(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return cp.State.Status == capsule.Completed, nil
}

// DependencyState reports the state of the capsule a depends_on entry
// names, read from the stream's leader; known is false when sagad has no
// checkpoint of it (never received, or ended and forgotten after the
// retention).
func (f *facts) DependencyState(ctx context.Context, id string) (state capsule.State, known bool, err error) {
	if !ValidKey(id) {
		return "", false, nil
	}
	cp, _, err := f.checkpoints.GetLatest(ctx, id, nil)
	if errors.Is(err, ErrNotFound) {
		return "", false, nil
	}
	if f.checkpoints.Corrupt.Report(err, "its dependents halt dependency_failed") {
		// Its state is lost, and it halts state_corrupt when next touched:
		// waiting for it would be waiting forever.
		return capsule.Halted, true, nil
	}
	if err != nil {
		return "", false, err
	}
	return cp.State.Status, true, nil
}
