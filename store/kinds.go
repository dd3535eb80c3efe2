package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Kinds returns the task kind of every capsule whose bytes are kept, by
// key, reading SAGA_CAPSULES' latest values in one stream. Bytes that are
// not a capsule (bad input kept verbatim) are left out.
func (s *Store) Kinds(ctx context.Context) (map[string]string, error) {
	w, err := s.capsules.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("capsule kinds: %w", err)
	}
	defer func() { _ = w.Stop() }()
	out := map[string]string{}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("capsule kinds: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("capsule kinds: watcher closed")
			}
			if e == nil {
				return out, nil
			}
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			if c, err := DecodeCapsule(e.Value()); err == nil {
				out[e.Key()] = c.Task.Kind
			}
		}
	}
}
