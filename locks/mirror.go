package locks

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// RECEPTION asks whether every lock a capsule names is available: a KV get
// per path, one sequential round trip per capsule on the hot path, whose
// answer can change the moment it is read (only [Manager.TryAcquire] at
// EXECUTION decides). The mirror answers the common question, "is it
// free?", from a watch of the bucket instead. It only ever says free: an
// entry it holds for the path is confirmed by a read before RECEPTION halts
// lock_unavailable on it, so a mirror that is behind (or a watch that
// stalled) can at worst let a capsule on to EXECUTION, which then waits for
// the lock as it does for one taken just after RECEPTION's read — never
// halt one whose lock is free.

// mirror is the bucket as a watch last delivered it: the keys that hold a
// lease (live or not: an expired one is read), known only while the watch
// runs and once it delivered the bucket's values.
type mirror struct {
	mu    sync.RWMutex
	ready bool
	vals  map[string]struct{}
	// until is the context of the watch that runs (nil: none), gen its
	// number: a watch that ends after a newer one started leaves the
	// newer one's mirror alone.
	until context.Context
	gen   uint64
}

// Mirror starts following the bucket until ctx ends, so that
// [Manager.Available] answers "free" without a read. Calling it while a
// mirror runs does nothing; once its ctx ended, a call starts another. The watch is the KV client's (an ordered
// consumer, recreated by the client after a gap); should it end, Available
// reads again.
func (m *Manager) Mirror(ctx context.Context) error {
	m.mirror.mu.Lock()
	defer m.mirror.mu.Unlock()
	if m.mirror.until != nil && m.mirror.until.Err() == nil {
		return nil
	}
	w, err := m.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("locks: mirror %s: %w", m.cfg.Bucket, err)
	}
	m.mirror.gen++
	m.mirror.until, m.mirror.ready, m.mirror.vals = ctx, false, map[string]struct{}{}
	go m.follow(ctx, w, m.mirror.gen)
	return nil
}

// follow applies the watch's entries to the mirror until ctx ends or the
// watch does; the mirror then answers nothing.
func (m *Manager) follow(ctx context.Context, w jetstream.KeyWatcher, gen uint64) {
	defer func() {
		_ = w.Stop()
		m.mirror.mu.Lock()
		if m.mirror.gen == gen {
			m.mirror.until, m.mirror.ready, m.mirror.vals = nil, false, nil
		}
		m.mirror.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			m.mirror.apply(e, gen)
		}
	}
}

// apply records one watch entry: nil marks the end of the bucket's initial
// values, a delete or purge marker a free key. An ended watch's (gen) are
// dropped.
func (mr *mirror) apply(e jetstream.KeyValueEntry, gen uint64) {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	switch {
	case mr.gen != gen:
	case e == nil:
		mr.ready = true
	case e.Operation() == jetstream.KeyValuePut:
		mr.vals[e.Key()] = struct{}{}
	default:
		delete(mr.vals, e.Key())
	}
}

// hold records a lock this process just took, before the watch brings it
// back: RECEPTION in the same process then sees its own sagad's writes. Only
// "held" is recorded ahead of the watch, which at worst makes RECEPTION
// read the lock (the answer it would have had without the mirror); a free
// lock is learnt from the watch alone.
func (mr *mirror) hold(path string) {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.vals != nil {
		mr.vals[Key(path)] = struct{}{}
	}
}

// free reports whether the mirror is following the bucket and holds no
// entry for path's key: the lock is free as far as it knows.
func (mr *mirror) free(path string) bool {
	mr.mu.RLock()
	defer mr.mu.RUnlock()
	if !mr.ready {
		return false
	}
	_, held := mr.vals[Key(path)]
	return !held
}
