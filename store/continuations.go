package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/cas"
	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/internal/jspub"
)

// Continuations keeps one continuation record per paused capsule in the
// SAGA_CONTINUATIONS bucket (key = capsule key). It is a projection of the
// checkpoint's pause block, written whenever a capsule parks and deleted when
// it resumes or ends, so operators and tools can list what is paused cheaply.
type Continuations struct {
	kv jetstream.KeyValue
	w  *jspub.Writes // bounds and observes every write
}

// ContinuationOf derives the continuation record of a paused checkpoint.
func ContinuationOf(cp *capsule.Checkpoint) capsule.Continuation {
	st := cp.State
	c := capsule.Continuation{
		SchemaVersion: "1.0",
		CapsuleID:     cp.CapsuleID,
		Phase:         st.Phase,
		PhaseName:     st.Phase.String(),
		Cycle:         st.Cycle,
	}
	if st.Pause != nil {
		c.Trigger, c.Reason, c.By, c.CreatedAt = st.Pause.Trigger, st.Pause.Reason, st.Pause.By, st.Pause.At
	}
	return c
}

// Put writes the continuation of cp.
func (s *Continuations) Put(ctx context.Context, cp *capsule.Checkpoint) error {
	b, err := json.Marshal(ContinuationOf(cp))
	if err != nil {
		return err
	}
	if err := s.w.Do(ctx, func(ctx context.Context) error { _, err := s.kv.Put(ctx, cp.Key, b); return err }); err != nil {
		return fmt.Errorf("put continuation %s: %w", cp.Key, err)
	}
	return nil
}

// Delete removes the continuation of key; deleting a missing one is fine.
func (s *Continuations) Delete(ctx context.Context, key string) error {
	rctx, cancel := readCtx(ctx, s.w)
	_, err := s.kv.Get(rctx, key)
	cancel()
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err := s.w.Do(ctx, func(ctx context.Context) error { return s.kv.Delete(ctx, key) }); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete continuation %s: %w", key, err)
	}
	return nil
}

// Get returns the continuation of key.
func (s *Continuations) Get(ctx context.Context, key string) (capsule.Continuation, error) {
	var c capsule.Continuation
	rctx, cancel := readCtx(ctx, s.w)
	e, err := s.kv.Get(rctx, key)
	cancel()
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return c, fmt.Errorf("%w: no continuation for %s", ErrNotFound, key)
	}
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		return c, corrupt.New(corrupt.Continuations, key, e.Revision(), err)
	}
	return c, nil
}

// Keys lists the keys of paused capsules.
func (s *Continuations) Keys(ctx context.Context) ([]string, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, err
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	return keys, nil
}

// DeleteIfStale removes the continuation of key unless it describes the
// pause cp is in now: a record written by a newer pause is kept. The delete
// is a compare-and-set on the record's revision under sagad's one retry
// policy (cas.Retry): a lost delete reads the record again and judges it
// again.
func (s *Continuations) DeleteIfStale(ctx context.Context, key string, cp *capsule.Checkpoint) error {
	err := cas.Retry(ctx, func(ctx context.Context) error {
		rctx, cancel := readCtx(ctx, s.w)
		e, err := s.kv.Get(rctx, key)
		cancel()
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		var c capsule.Continuation
		if json.Unmarshal(e.Value(), &c) == nil {
			st := cp.State
			current := (st.Status == capsule.Paused || st.Status == capsule.Waiting || st.Status == capsule.WaitingForOperator) && st.Pause != nil && c.CreatedAt.Equal(st.Pause.At)
			// A record written after cp was is a newer pause's: it stays
			// (read again after a lost delete, that is what it is).
			if current || c.CreatedAt.After(cp.UpdatedAt) {
				return nil
			}
		}
		err = s.w.Do(ctx, func(ctx context.Context) error { return s.kv.Delete(ctx, key, jetstream.LastRevision(e.Revision())) })
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("delete continuation %s: %w", key, err)
	}
	return nil
}
