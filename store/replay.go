package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
)

// ErrRunBytesLost: a replayed run's corrected capsule bytes are neither kept
// under its key nor staged (a replay died before it staged them, which it
// does before it starts the run, so this is a bug or a purge by hand).
var ErrRunBytesLost = errors.New("the bytes of the capsule's run are lost")

// stagedKey is where a replay stages corrected bytes before it starts the
// run that uses them: addressed by their digest, so racing replays with
// other bytes never overwrite them, and the run's checkpoint (which records
// the digest) finds them again after a crash.
func stagedKey(key, digest string) string { return key + ".replay." + digest }

// StageBytes keeps corrected capsule bytes of digest for a replay of key,
// for the retention, until the replay's run keeps them as its own
// (KeepRunBytes).
func (s *Store) StageBytes(ctx context.Context, key, digest string, raw []byte) error {
	m := nats.NewMsg(capsuleSubject(stagedKey(key, digest)))
	m.Data = raw
	if s.retention > 0 {
		m.Header.Set(jetstream.MsgTTLHeader, s.retention.String())
	}
	if err := s.publish(ctx, m); err != nil {
		return fmt.Errorf("stage the corrected capsule of %s: %w", key, err)
	}
	return nil
}

// KeepRunBytes keeps raw as the bytes of cp's current run, marked with the
// run (HeaderRun) and without the previous run's outcome mark and time to
// live: phases act on them, and the run's outcome carries them.
func (s *Store) KeepRunBytes(ctx context.Context, cp *capsule.Checkpoint, raw []byte) error {
	m := nats.NewMsg(capsuleSubject(cp.Key))
	m.Data = raw
	if run := cp.RunNumber(); run > 1 {
		m.Header.Set(HeaderRun, strconv.Itoa(run))
	}
	if err := s.publish(ctx, m); err != nil {
		return fmt.Errorf("keep the bytes of run %d of %s: %w", cp.RunNumber(), cp.Key, err)
	}
	if c, err := DecodeCapsule(raw); err == nil {
		// This process's phases use them at once. A copy: an operator's
		// corrected bytes are the caller's (Cache.Seed keeps what it gets).
		s.Cache.Seed(cp.Key, bytes.Clone(raw), c)
	}
	return nil
}

// RunBytes returns the bytes of cp's current run, finishing what a replay
// that died half-way left undone: bytes still marked with an earlier run
// are kept again as this run's, and corrected bytes it staged are kept
// under the key. The checkpoint is the truth: bytes whose digest is not the
// run's are never used.
func (s *Store) RunBytes(ctx context.Context, cp *capsule.Checkpoint) ([]byte, *capsule.Capsule, error) {
	rctx, cancel := readCtx(ctx, s.writes())
	m, err := s.capsulesStream.GetLastMsgForSubject(rctx, capsuleSubject(cp.Key))
	cancel()
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil, fmt.Errorf("capsule bytes of %s: %w", cp.Key, err)
	}
	if err == nil {
		c, derr := DecodeCapsule(m.Data)
		if derr == nil && (cp.Digest == "" || c.Integrity.SHA256 == cp.Digest) {
			if bytesRun(m.Header) != cp.RunNumber() {
				// An earlier run's (with its outcome mark and time to
				// live): kept again as this run's.
				if err := s.KeepRunBytes(ctx, cp, m.Data); err != nil {
					return nil, nil, err
				}
			}
			return m.Data, c, nil
		}
	}
	rctx, cancel = readCtx(ctx, s.writes())
	e, err := s.capsules.Get(rctx, stagedKey(cp.Key, cp.Digest))
	cancel()
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil, fmt.Errorf("%w: %s run %d (digest %s)", ErrRunBytesLost, cp.Key, cp.RunNumber(), cp.Digest)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("staged capsule bytes of %s: %w", cp.Key, err)
	}
	c, err := DecodeCapsule(e.Value())
	if err != nil || c.Integrity.SHA256 != cp.Digest {
		return nil, nil, fmt.Errorf("%w: %s run %d: the staged bytes are not digest %s", ErrRunBytesLost, cp.Key, cp.RunNumber(), cp.Digest)
	}
	if err := s.KeepRunBytes(ctx, cp, e.Value()); err != nil {
		return nil, nil, err
	}
	return e.Value(), c, nil
}
