package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// docKey is where producer's document of digest (lowercase hex SHA-256)
// under id is kept: one token more than a run's key, which neither
// the run lookups nor the producers' listing read as a record; by digest,
// so two sagads making the same run of two documents at once each keep
// their own.
func docKey(id, producer, digest string) string {
	return compositionKey(id, producer) + ".doc." + digest
}

// ErrBadDigest refuses a document digest that is not lowercase hex SHA-256.
var ErrBadDigest = errors.New("document digest: want 64 lowercase hex digits")

func validDigest(d string) bool {
	if len(d) != 64 {
		return false
	}
	for _, c := range d {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// PutDoc keeps the document b, of digest, of a run whose steps sagad
// builds later (a verification loop's rounds, the steps held until a loop
// passes): the runner builds them from it. Writing it again is harmless.
func (c *Compositions) PutDoc(ctx context.Context, id, producer, digest string, b []byte) error {
	if !validDigest(digest) {
		return ErrBadDigest
	}
	if _, err := c.kv.Put(ctx, docKey(id, producer, digest), b); err != nil {
		return fmt.Errorf("composition %s document: %w", id, err)
	}
	return nil
}

// Doc returns the document PutDoc kept; it wraps [ErrNotFound] when there
// is none.
func (c *Compositions) Doc(ctx context.Context, id, producer, digest string) ([]byte, error) {
	if !validDigest(digest) {
		return nil, ErrBadDigest
	}
	e, err := c.kv.Get(ctx, docKey(id, producer, digest))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: composition %s document %s", ErrNotFound, id, digest)
	}
	if err != nil {
		return nil, fmt.Errorf("composition %s document: %w", id, err)
	}
	return e.Value(), nil
}
