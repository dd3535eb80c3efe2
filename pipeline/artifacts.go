package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
)

// ArtifactRef is the artifact: URI of the artifact of (capsuleID, cycle).
func ArtifactRef(capsuleID string, cycle int) string {
	return "artifact:" + capsuleID + "/" + strconv.Itoa(cycle)
}

// artifactStore keeps artifact records in the SAGA_ARTIFACTS object store,
// one object per (capsule, cycle); a redelivered put overwrites it with the
// same name, so it is idempotent.
type artifactStore struct {
	os jetstream.ObjectStore
}

func (s *artifactStore) Put(ctx context.Context, a capsule.Artifact) (string, error) {
	a.Ref = ArtifactRef(a.CapsuleID, a.Cycle)
	b, err := json.Marshal(a)
	if err != nil {
		return "", err
	}
	name := strings.TrimPrefix(a.Ref, "artifact:")
	if _, err := s.os.PutBytes(ctx, name, b); err != nil {
		return "", fmt.Errorf("put artifact %s: %w", name, err)
	}
	return a.Ref, nil
}

func (s *artifactStore) Get(ctx context.Context, ref string) (capsule.Artifact, error) {
	var a capsule.Artifact
	b, err := s.os.GetBytes(ctx, strings.TrimPrefix(ref, "artifact:"))
	if err != nil {
		return a, fmt.Errorf("get artifact %s: %w", ref, err)
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return a, fmt.Errorf("decode artifact %s: %w", ref, err)
	}
	return a, nil
}

func (s *artifactStore) Lookup(ctx context.Context, capsuleID string, cycle int) (capsule.Artifact, bool, error) {
	a, err := s.Get(ctx, ArtifactRef(capsuleID, cycle))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return a, false, nil
	}
	if err != nil {
		return a, false, err
	}
	return a, true, nil
}
