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
	res := rules.Evaluate(ctx, rules.Input{
		Capsule: in.Capsule,
		Raw:     in.Raw,
		Config:  env.Rules,
		Facts:   env.Facts,
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
