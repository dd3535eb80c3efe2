package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/store"
)

// ChainStep is one step of a chain as `sagactl chain` shows it.
type ChainStep struct {
	Step       int           `json:"step"`
	CapsuleID  string        `json:"capsule_id"`
	Kind       string        `json:"kind"`
	State      capsule.State `json:"state"`
	Phase      int           `json:"phase"`
	PhaseName  string        `json:"phase_name"`
	HaltReason string        `json:"halt_reason,omitempty"`
	WaitingFor []string      `json:"waiting_for,omitempty"`
}

// Chain is a chain's steps in order.
type Chain struct {
	ChainID string      `json:"chain_id"`
	Steps   []ChainStep `json:"steps"`
}

// maxChainSteps matches chain.schema.json's maxItems.
const maxChainSteps = 64

// Chain reads the checkpoints of chainID's steps, found by their
// deterministic ids ([capsule.ChainStepID]) from step 0 to the first that
// sagad has not received; it wraps store.ErrNotFound when there is none.
func (c *Client) Chain(ctx context.Context, chainID string) (Chain, error) {
	out := Chain{ChainID: chainID, Steps: []ChainStep{}}
	capsules, err := c.js.KeyValue(ctx, store.CapsulesBucket)
	if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return out, fmt.Errorf("bind %s: %w", store.CapsulesBucket, err)
	}
	for i := 0; i < maxChainSteps; i++ {
		id := capsule.ChainStepID(chainID, i)
		cp, _, err := c.checkpoints.Get(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			break
		}
		if err != nil {
			return out, err
		}
		s := ChainStep{
			Step: i, CapsuleID: id, State: cp.State.Status, Phase: int(cp.State.Phase),
			PhaseName: cp.State.PhaseName, HaltReason: cp.State.HaltReason, WaitingFor: cp.State.WaitingFor,
		}
		if capsules != nil {
			if e, err := capsules.Get(ctx, id); err == nil {
				if k, err := store.DecodeCapsule(e.Value()); err == nil && k != nil {
					s.Kind = k.Task.Kind
				}
			}
		}
		out.Steps = append(out.Steps, s)
	}
	if len(out.Steps) == 0 {
		return out, fmt.Errorf("%w: no step of chain %s", store.ErrNotFound, chainID)
	}
	return out, nil
}
