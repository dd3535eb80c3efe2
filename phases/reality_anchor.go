package phases

import (
	"context"
	"fmt"
	"strings"

	"github.com/sagad/sagad/capsule"
)

// RealityAnchor is phase 1: every context ref and the target must exist
// (the truthfulness baseline), resolved by [Env.Resolver].
type RealityAnchor struct{}

// Run checks context refs in order, then the target. A ref to the final
// artifact of one of the capsule's own dependencies (artifact:<id>/final
// with <id> in depends_on: a chain step's input) cannot resolve yet, since
// the capsule waits for its dependencies after this phase: EXECUTION
// resolves it, and halts context_ref_missing if it does not.
func (RealityAnchor) Run(ctx context.Context, env *Env, in *Input) Decision {
	for i, ref := range in.Capsule.ContextRefs {
		if dependencyFinal(in.Capsule, ref) {
			continue
		}
		ok, err := env.Resolver.Exists(ctx, ref)
		if err != nil {
			return RetryLater(fmt.Errorf("reality anchor: resolve %q: %w", ref, err))
		}
		if !ok {
			return HaltWith(capsule.ContextRefMissing(ref), capsule.Finding{
				Field: fmt.Sprintf("context_refs[%d]", i), Message: fmt.Sprintf("%q does not resolve", ref),
			})
		}
	}
	ok, err := env.Resolver.Exists(ctx, in.Capsule.Target)
	if err != nil {
		return RetryLater(fmt.Errorf("reality anchor: resolve target: %w", err))
	}
	if !ok {
		return HaltWith(capsule.TargetMissing(in.Capsule.Target), capsule.Finding{
			Field: "target", Message: fmt.Sprintf("%q does not resolve", in.Capsule.Target),
		})
	}
	return AdvanceWith()
}

// dependencyFinal reports whether ref is artifact:<id>/final for an <id> in
// c.DependsOn.
func dependencyFinal(c *capsule.Capsule, ref string) bool {
	rest, ok := strings.CutPrefix(ref, "artifact:")
	if !ok {
		return false
	}
	id, ok := strings.CutSuffix(rest, "/final")
	if !ok {
		return false
	}
	if cid, ok := capsule.CanonicalID(id); ok {
		id = cid
	}
	for _, d := range c.DependsOn {
		if cd, ok := capsule.CanonicalID(d); ok {
			d = cd
		}
		if d == id {
			return true
		}
	}
	return false
}
