package jspub

import (
	"context"
	"encoding/json"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/internal/cas"
)

// Op is what a [Mutate] change asks to do with the key.
type Op int

const (
	// Keep leaves the key as it is: nothing is written.
	Keep Op = iota
	// Put stores the changed value (JSON).
	Put
	// Delete deletes the key.
	Delete
)

// Mutate is the compare-and-set loop of one KV key that budgets, waves and
// locks share, under sagad's one retry policy (cas.Retry): read returns the
// current value and its revision (0: no entry, or a delete marker), change
// says what it should become, and the write goes through w only if the key is
// still at the revision read; when another writer got in between, it reads
// again and asks change again. A value read at a revision but not decodable
// (read's business) is replaced by a compare-and-set on that revision.
//
// It returns the value as stored (the read one on Keep), and the key's
// revision after the write (the read one on Keep, 0 on Delete).
func Mutate[T any](ctx context.Context, kv jetstream.KeyValue, w *Writes, key string,
	read func(ctx context.Context) (T, uint64, error), change func(cur T) (T, Op, error)) (T, uint64, error) {
	var (
		out    T
		outRev uint64
	)
	err := cas.Retry(ctx, func(ctx context.Context) error {
		cur, rev, err := read(ctx)
		if err != nil {
			return err
		}
		next, op, err := change(cur)
		if err != nil {
			return err
		}
		var b []byte
		if op == Put {
			if b, err = json.Marshal(next); err != nil {
				return err
			}
		}
		var newRev uint64
		if op != Keep {
			err = w.Do(ctx, func(ctx context.Context) (err error) {
				switch {
				case op == Delete:
					err = kv.Delete(ctx, key, jetstream.LastRevision(rev))
				case rev == 0:
					// Create also succeeds over a delete marker, by a
					// compare-and-set on the marker's revision.
					newRev, err = kv.Create(ctx, key, b)
				default:
					newRev, err = kv.Update(ctx, key, b, rev)
				}
				return err
			})
			if err != nil {
				return err
			}
		}
		out, outRev = next, newRev
		if op == Keep {
			out, outRev = cur, rev
		}
		return nil
	})
	if err != nil {
		var zero T
		return zero, 0, err
	}
	return out, outRev, nil
}
