package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/phases"
)

// ArtifactRef is the artifact: URI of the artifact of (capsuleID, cycle).
func ArtifactRef(capsuleID string, cycle int) string {
	return "artifact:" + capsuleID + "/" + strconv.Itoa(cycle)
}

// Artifact records are small; the object store's default 128 KiB chunk
// buffer is allocated whole for every put, so chunks are sized to fit.
const (
	minChunk = 4 << 10
	maxChunk = 128 << 10
)

// recentArtifacts bounds the in-process copies kept for REVIEW.
const recentArtifacts = 1024

// artifactStore keeps artifact records in the SAGA_ARTIFACTS object store,
// one object per (capsule, cycle); a redelivered put overwrites it with the
// same name, so it is idempotent. It keeps the artifacts it wrote last in
// memory: REVIEW usually runs in the process that ran EXECUTION, and an
// object store read costs a consumer of its own.
type artifactStore struct {
	os jetstream.ObjectStore

	mu     sync.Mutex
	recent map[string]capsule.Artifact
}

func newArtifactStore(os jetstream.ObjectStore) *artifactStore {
	return &artifactStore{os: os, recent: make(map[string]capsule.Artifact)}
}

func (s *artifactStore) Put(ctx context.Context, a capsule.Artifact) (string, error) {
	a.Ref = ArtifactRef(a.CapsuleID, a.Cycle)
	b, err := json.Marshal(a)
	if err != nil {
		return "", err
	}
	name := strings.TrimPrefix(a.Ref, "artifact:")
	chunk := uint32(min(max(len(b), minChunk), maxChunk))
	meta := jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: chunk}}
	if _, err := s.os.Put(ctx, meta, bytes.NewReader(b)); err != nil {
		return "", fmt.Errorf("put artifact %s: %w", name, err)
	}
	s.remember(a)
	return a.Ref, nil
}

func (s *artifactStore) remember(a capsule.Artifact) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.recent[a.Ref]; !ok && len(s.recent) >= recentArtifacts {
		for k := range s.recent {
			delete(s.recent, k)
			break
		}
	}
	s.recent[a.Ref] = a
}

func (s *artifactStore) Get(ctx context.Context, ref string) (capsule.Artifact, error) {
	s.mu.Lock()
	a, ok := s.recent[ref]
	s.mu.Unlock()
	if ok {
		return a, nil
	}
	b, err := s.os.GetBytes(ctx, strings.TrimPrefix(ref, "artifact:"))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return a, fmt.Errorf("get artifact %s: %w: %w", ref, phases.ErrArtifactGone, err)
	}
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
