package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/cas"
	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/internal/jspub"
)

// ErrNotFound is returned for a capsule key with no checkpoint.
var ErrNotFound = errors.New("capsule not found")

// ErrConflict means the checkpoint changed under us: re-read and decide again.
var ErrConflict = errors.New("checkpoint changed concurrently")

// Checkpoints reads and writes checkpoints in the SAGA_CHECKPOINTS bucket.
type Checkpoints struct {
	js jetstream.JetStream // for writes; nil for readers
	// ttl is the retention: a checkpoint that records the end of its
	// capsule is written with it as its time to live.
	ttl time.Duration
	kv  jetstream.KeyValue
	// w bounds and observes every write (see internal/jspub.Writes).
	w *jspub.Writes
	// Corrupt reports checkpoints sagad did not write. Nil reports nothing.
	Corrupt *corrupt.Reporter
	// written is called after each write of this process (see OnWrite).
	written atomic.Pointer[func(cp *capsule.Checkpoint, rev uint64)]
}

// OnWrite sets f to be called, on the writer's goroutine and so quickly,
// after every checkpoint this process wrote, with the revision it was
// written at: sagad's rescuer learns its own writes this way instead of
// being sent each one back by JetStream. cp must not be kept or changed.
func (s *Checkpoints) OnWrite(f func(cp *capsule.Checkpoint, rev uint64)) { s.written.Store(&f) }

// wrote reports a write to the function set by OnWrite.
func (s *Checkpoints) wrote(cp *capsule.Checkpoint, rev uint64, err error) {
	if err != nil {
		return
	}
	if f := s.written.Load(); f != nil && *f != nil {
		(*f)(cp, rev)
	}
}

// DecodeCheckpoint is the one decoder of a SAGA_CHECKPOINTS value: the
// checkpoint stored under key at revision rev. Bytes that are no
// checkpoint sagad wrote under key — not JSON, or JSON that is not one
// (JetStream's answer to a publish, sent onto the key by a client that
// named it as its reply subject, decodes into an empty checkpoint) — are a
// [corrupt.Error]: reading them again will not change them.
func DecodeCheckpoint(key string, rev uint64, b []byte) (*capsule.Checkpoint, error) {
	cp := new(capsule.Checkpoint)
	var err error
	switch {
	case json.Unmarshal(b, cp) != nil:
		err = errors.New("not a JSON checkpoint")
	case cp.SchemaVersion == "":
		// (capsule_id may be empty: bad input kept under its intake
		// sequence claims none.)
		err = errors.New("no schema_version: not a checkpoint")
	case cp.Key != key:
		err = fmt.Errorf("the checkpoint of key %q", cp.Key)
	}
	if err != nil {
		return nil, corrupt.New(corrupt.Checkpoints, key, rev, err)
	}
	return cp, nil
}

// ReaderOf returns read-only access to the checkpoints in kv (the
// SAGA_CHECKPOINTS bucket), for clients that write nothing.
func ReaderOf(kv jetstream.KeyValue) *Checkpoints { return &Checkpoints{kv: kv} }

// Watch watches the checkpoint of key (sagactl wait and watch).
func (s *Checkpoints) Watch(ctx context.Context, key string) (jetstream.KeyWatcher, error) {
	return s.kv.Watch(ctx, key)
}

// Get returns the checkpoint stored under key and its KV revision.
func (s *Checkpoints) Get(ctx context.Context, key string) (*capsule.Checkpoint, uint64, error) {
	return s.GetCached(ctx, key, nil)
}

// GetCached is Get, without decoding the entry when c holds it already: an entry
// is known by its key and revision (its stream sequence), and cached
// checkpoints are never changed in place.
func (s *Checkpoints) GetCached(ctx context.Context, key string, c *Cache) (*capsule.Checkpoint, uint64, error) {
	rctx, cancel := readCtx(ctx, s.w)
	e, err := s.kv.Get(rctx, key)
	cancel()
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get checkpoint %s: %w", key, err)
	}
	if c != nil {
		if cp, rev, ok := c.Get(key); ok && rev == e.Revision() {
			return cp, rev, nil
		}
	}
	cp, err := DecodeCheckpoint(key, e.Revision(), e.Value())
	if err != nil {
		return nil, 0, err
	}
	return cp, e.Revision(), nil
}

// GetLatest is Get answered by the stream's leader, never by a replica that
// may be behind (a KV get is a direct get, which any replica of an R3 bucket
// may answer with what it has so far). Reads that decide after a lost
// compare-and-set, or about a message newer than what a replica showed, use
// it: they must see the latest write.
func (s *Checkpoints) GetLatest(ctx context.Context, key string, c *Cache) (*capsule.Checkpoint, uint64, error) {
	if s.js == nil {
		return s.GetCached(ctx, key, c)
	}
	data, rev, err := lastFromLeader(ctx, s.js, s.w, CheckpointsBucket, key)
	if err != nil {
		return nil, 0, fmt.Errorf("get checkpoint %s: %w", key, err)
	}
	if c != nil {
		if cp, crev, ok := c.Get(key); ok && crev == rev {
			return cp, rev, nil
		}
	}
	cp, err := DecodeCheckpoint(key, rev, data)
	if err != nil {
		return nil, 0, err
	}
	return cp, rev, nil
}

// Create stores the first checkpoint of a capsule; ErrConflict if one exists.
// A capsule that ends at once (RECEPTION halts it) gets the retention as
// time to live.
func (s *Checkpoints) Create(ctx context.Context, cp *capsule.Checkpoint) (rev uint64, err error) {
	defer func() { s.wrote(cp, rev, err) }()
	e, err := encode(cp)
	if err != nil {
		return 0, err
	}
	defer e.release()
	b := e.b
	if s.js != nil && s.ttl > 0 && cp.Terminal() {
		// Expected last sequence 0: the key has no entry, not even a
		// marker; a marker left by an expired namesake conflicts until it
		// expires itself, a second later.
		return s.write(ctx, cp.Key, b, 0, s.ttl)
	}
	if s.js != nil {
		// The common case, a key never written, in one request; the KV
		// client's Create also takes a key over a delete marker.
		if rev, err := s.write(ctx, cp.Key, b, 0, 0); !errors.Is(err, ErrConflict) {
			return rev, err
		}
	}
	rev, err = jspub.Write(ctx, s.w, func(ctx context.Context) (uint64, error) { return s.kv.Create(ctx, cp.Key, b) })
	if cas.Conflict(err) {
		return 0, ErrConflict
	}
	return rev, err
}

// update writes cp if the stored revision is still rev; ErrConflict
// otherwise. Unexported: a checkpoint changes by [Store.Apply] (a machine
// event), or replaces a value sagad did not write ([Store.Replace],
// [Store.ReplaceCorrupt]).
func (s *Checkpoints) update(ctx context.Context, cp *capsule.Checkpoint, rev uint64) (written uint64, err error) {
	defer func() { s.wrote(cp, written, err) }()
	e, err := encode(cp)
	if err != nil {
		return 0, err
	}
	defer e.release()
	b := e.b
	if s.js != nil {
		ttl := time.Duration(0)
		if cp.Terminal() {
			ttl = s.ttl // the last write of an ended capsule
		}
		return s.write(ctx, cp.Key, b, rev, ttl)
	}
	n, err := jspub.Write(ctx, s.w, func(ctx context.Context) (uint64, error) { return s.kv.Update(ctx, cp.Key, b, rev) })
	if cas.Conflict(err) {
		return 0, ErrConflict
	}
	return n, err
}

// write is a KV update of key at revision rev (0: the key has no entry),
// published without the KV client: it is the hot path (every transition and
// claim), see internal/jspub. The subject is the bucket's own: sagad's
// JetStream contexts use no domain or API prefix (a KV client would add them;
// sagad would have to as well).
func (s *Checkpoints) write(ctx context.Context, key string, b []byte, rev uint64, ttl time.Duration) (uint64, error) {
	p := kvWrite(key, b, strconv.FormatUint(rev, 10), ttl)
	seq, err := s.w.Publish(ctx, s.js.Conn(), p.Msg())
	p.Release()
	if cas.Conflict(err) {
		return 0, ErrConflict
	}
	if err != nil {
		return 0, fmt.Errorf("write checkpoint %s: %w", key, err)
	}
	return seq, nil
}

// List returns every checkpoint, sorted by creation time. It reads the
// bucket's latest values in one stream (a KV watcher), not a read per key.
func (s *Checkpoints) List(ctx context.Context) ([]*capsule.Checkpoint, error) {
	w, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []*capsule.Checkpoint
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("list checkpoints: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("list checkpoints: watcher closed")
			}
			if e == nil { // every current value has been delivered
				sort.Slice(out, func(i, j int) bool {
					if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
						return out[i].CreatedAt.Before(out[j].CreatedAt)
					}
					return out[i].Key < out[j].Key
				})
				return out, nil
			}
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			cp, err := DecodeCheckpoint(e.Key(), e.Revision(), e.Value())
			if err != nil {
				// One value sagad did not write must not hide the others.
				s.Corrupt.Report(err, "left out of the list")
				continue
			}
			out = append(out, cp)
		}
	}
}

// Find returns the checkpoint of id: the key itself, or else the capsule that
// claimed this capsule_id but was stored under an "x-" key.
func (s *Checkpoints) Find(ctx context.Context, id string) (*capsule.Checkpoint, error) {
	if cid, ok := capsule.CanonicalID(id); ok {
		id = cid // an upper-case UUID names the same capsule
	}
	if ValidKey(id) {
		cp, _, err := s.Get(ctx, id)
		if !errors.Is(err, ErrNotFound) {
			return cp, err
		}
	}
	all, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	var found *capsule.Checkpoint
	for _, cp := range all {
		if cp.CapsuleID == id && strings.HasPrefix(cp.Key, "x-") {
			found = cp // the latest wins
		}
	}
	if found == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return found, nil
}

// ValidKey reports whether s can be a KV key (and so a capsule key).
func ValidKey(s string) bool {
	if s == "" || len(s) > 256 || s[0] == '.' || s[len(s)-1] == '.' {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '=':
		default:
			return false
		}
	}
	return true
}

// NewCheckpoint is the state of a capsule entering RECEPTION.
func NewCheckpoint(key, capsuleID, traceID, waveID, digest string, now time.Time) *capsule.Checkpoint {
	return &capsule.Checkpoint{
		SchemaVersion: capsule.CheckpointSchemaVersion,
		CapsuleID:     capsuleID,
		Key:           key,
		TraceID:       traceID,
		WaveID:        waveID,
		Digest:        digest,
		CreatedAt:     now,
		UpdatedAt:     now,
		State: capsule.CheckpointState{
			Phase:        capsule.Reception,
			PhaseName:    capsule.Reception.String(),
			Status:       capsule.InProgress,
			LocksHeld:    []string{},
			ArtifactRefs: []string{},
		},
		History: []capsule.Transition{},
	}
}

// WatchAll watches every checkpoint with its value: first the current ones,
// then a nil entry, then every change and deletion (the console's index).
func (s *Checkpoints) WatchAll(ctx context.Context) (jetstream.KeyWatcher, error) {
	return s.kv.WatchAll(ctx)
}
