package store

import (
	"context"
	"errors"
	"strings"

	"github.com/sagad/sagad/capsule"
)

// FinalSuffix ends the context ref artifact:<capsule_id>/final, which names
// a capsule's final artifact (see [FinalArtifactRef]).
const FinalSuffix = "/final"

// FinalArtifactRef returns the ref of cp's final artifact: the artifact of the
// last cycle a reviewer approved, once the capsule completed. An operator's
// accept over another verdict is recorded as the operator's approval of
// that cycle (machine.AcceptedOver), so it counts the same. A capsule that
// has not completed has no final artifact yet (a chain step waits for its
// dependency, so by the time it asks the dependency has completed).
func FinalArtifactRef(cp *capsule.Checkpoint) (string, bool) {
	if cp == nil || cp.State.Status != capsule.Completed {
		return "", false
	}
	for i := len(cp.State.Reviews) - 1; i >= 0; i-- {
		if r := cp.State.Reviews[i]; r.Verdict == capsule.Approved {
			return ArtifactRef(cp.CapsuleID, r.Cycle), true
		}
	}
	if n := len(cp.State.Reviews); n > 0 {
		// Completed with no approval: an operator accepted over the verdict
		// before accepts were recorded as approvals. That cycle's artifact
		// is the one accepted, so the capsule's dependents go on (a replay
		// of one that halted context_ref_missing now resolves).
		return ArtifactRef(cp.CapsuleID, cp.State.Reviews[n-1].Cycle), true
	}
	return "", false
}

// ResolveFinal turns artifact:<capsule_id>/final into the ref of that
// capsule's final artifact; any other ref is returned as it is. ok is false
// when the capsule is unknown or has no final artifact.
func (s *Checkpoints) ResolveFinal(ctx context.Context, ref string) (string, bool, error) {
	rest, isArtifact := strings.CutPrefix(ref, "artifact:")
	id, isFinal := strings.CutSuffix(rest, FinalSuffix)
	if !isArtifact || !isFinal {
		return ref, true, nil
	}
	if _, ok := capsule.CanonicalID(id); !ok || !ValidKey(id) {
		return "", false, nil
	}
	cp, err := s.Find(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	final, ok := FinalArtifactRef(cp)
	return final, ok, nil
}
