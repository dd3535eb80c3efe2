package phases

import (
	"context"
	"fmt"

	"github.com/sagad/sagad/capsule"
)

// RealityAnchor is phase 1: every context ref and the target must exist
// (the truthfulness baseline), resolved by [Env.Resolver].
type RealityAnchor struct{}

// Run checks context refs in order, then the target.
func (RealityAnchor) Run(ctx context.Context, env *Env, in *Input) Decision {
	for i, ref := range in.Capsule.ContextRefs {
		ok, err := env.Resolver.Exists(ctx, ref)
		if err != nil {
			return RetryAfter(env.RetryDelay, fmt.Errorf("reality anchor: resolve %q: %w", ref, err))
		}
		if !ok {
			return HaltWith(capsule.ContextRefMissing(ref), capsule.Finding{
				Field: fmt.Sprintf("context_refs[%d]", i), Message: fmt.Sprintf("%q does not resolve", ref),
			})
		}
	}
	ok, err := env.Resolver.Exists(ctx, in.Capsule.Target)
	if err != nil {
		return RetryAfter(env.RetryDelay, fmt.Errorf("reality anchor: resolve target: %w", err))
	}
	if !ok {
		return HaltWith(capsule.TargetMissing(in.Capsule.Target), capsule.Finding{
			Field: "target", Message: fmt.Sprintf("%q does not resolve", in.Capsule.Target),
		})
	}
	return AdvanceWith()
}
