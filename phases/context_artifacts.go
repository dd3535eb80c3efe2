package phases

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sagad/sagad/capsule"
)

// FinalResolver is implemented by a [Resolver] that knows the context ref
// artifact:<capsule_id>/final (a chain step's input): it returns the ref of
// that capsule's final artifact, ok false when there is none (yet).
type FinalResolver interface {
	ResolveFinal(ctx context.Context, ref string) (string, bool, error)
}

// contextArtifacts loads the artifacts the capsule's artifact: context refs
// name, in order, for the executor's request: a chain step gets the previous
// step's final artifact this way. A ref that no longer resolves (REALITY_ANCHOR
// found it) halts context_ref_missing; a read that fails is retried.
func contextArtifacts(ctx context.Context, env *Env, c *capsule.Capsule) ([]capsule.Artifact, *Decision) {
	var out []capsule.Artifact
	for i, ref := range c.ContextRefs {
		if !strings.HasPrefix(ref, "artifact:") || env.Artifacts == nil {
			continue
		}
		resolved := ref
		if fr, ok := env.Resolver.(FinalResolver); ok {
			r, found, err := fr.ResolveFinal(ctx, ref)
			if err != nil {
				d := RetryLater(fmt.Errorf("execution: resolve %q: %w", ref, err))
				return nil, &d
			}
			if !found {
				d := HaltWith(capsule.ContextRefMissing(ref), capsule.Finding{
					Field: fmt.Sprintf("context_refs[%d]", i), Message: fmt.Sprintf("%q does not resolve", ref),
				})
				return nil, &d
			}
			resolved = r
		}
		a, err := env.Artifacts.Get(ctx, resolved)
		if errors.Is(err, ErrArtifactGone) {
			d := HaltWith(capsule.ContextRefMissing(ref), capsule.Finding{
				Field: fmt.Sprintf("context_refs[%d]", i), Message: fmt.Sprintf("%q is no longer stored", ref),
			})
			return nil, &d
		}
		if err != nil {
			d := RetryLater(fmt.Errorf("execution: load %q: %w", ref, err))
			return nil, &d
		}
		out = append(out, a)
	}
	return out, nil
}
