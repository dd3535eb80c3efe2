package phases

import (
	"context"
	"fmt"

	"github.com/sagad/sagad/rules"
)

// AutomatedGates is phase 3: every absolute rule of the constitution, all
// evaluated, every violation listed.
type AutomatedGates struct{}

// Run evaluates the constitution. A fact that cannot be read is retried, never
// counted as a pass.
func (AutomatedGates) Run(ctx context.Context, env *Env, in *Input) Decision {
	facts := env.Facts
	if facts != nil && in.Checkpoint != nil {
		facts = ownedID{Facts: facts, key: in.Checkpoint.Key}
	}
	res := rules.Evaluate(ctx, rules.Input{
		Capsule: in.Capsule,
		Raw:     in.Raw,
		Config:  env.Rules,
		Facts:   facts,
		Now:     env.Now(),
	})
	if len(res.Errors) > 0 {
		for n, err := range res.Errors {
			return RetryAfter(env.RetryDelay, fmt.Errorf("automated gates: rule %d: %w", n, err))
		}
	}
	if len(res.Violated) > 0 {
		return HaltWith(res.Halt(), res.Findings...)
	}
	return AdvanceWith()
}

// ownedID answers Rule 2's question without a lookup when the capsule runs
// under its own id as key: RECEPTION gave it the key only because no other
// content held the id (other content under a taken id gets an "x-" key).
type ownedID struct {
	rules.Facts
	key string
}

func (f ownedID) IDConflict(ctx context.Context, id, digest string) (bool, error) {
	if id == f.key {
		return false, nil
	}
	return f.Facts.IDConflict(ctx, id, digest)
}
