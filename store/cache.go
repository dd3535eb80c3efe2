package store

import (
	"bytes"
	"sync"
	"time"

	"github.com/sagad/sagad/capsule"
)

// cacheSize bounds the checkpoint cache. It only has to hold the capsules in
// flight in this process.
const cacheSize = 8192

// cacheMaxAge bounds how long an entry is trusted. A key can be forgotten
// (retention) and accepted again as another capsule; an entry younger than
// the retention cannot be of an earlier one (that one ended after the
// entry was written, and was kept for the retention after that). A quiet
// process would otherwise hold an entry for ever: a chain published again
// a week later reuses its steps' ids.
const cacheMaxAge = 10 * time.Minute

// Cache remembers the checkpoints this process wrote last, with their KV
// revision, so the next phase can compare-and-set without reading first. It
// is only ever a guess: a stale entry makes the write conflict, and the
// runner then reads the real checkpoint. A cached checkpoint that says "not
// current" is always re-read before a message is dropped.
//
// Checkpoints in the cache are shared and never changed in place: every
// change is made on a Clone and then stored as a new value.
type Cache struct {
	mu     sync.Mutex
	m      map[string]cacheEntry
	caps   map[string]parsedCapsule
	maxAge time.Duration
	now    func() time.Time
	// age is how long ago a time was: time.Since on the real clock, which
	// reads the monotonic clock only (time.Now reads the wall clock too:
	// twice the cost, and a phase asks the cache about three times).
	age func(time.Time) time.Duration
}

// parsedCapsule is a capsule decoded once per process: every phase gets the
// same bytes, and decoding them was the largest cost of a hop.
type parsedCapsule struct {
	raw []byte
	c   *capsule.Capsule
	at  time.Time
}

type cacheEntry struct {
	cp  *capsule.Checkpoint
	rev uint64
	at  time.Time
}

// NewCache returns an empty cache whose entries are trusted for 10 minutes.
func NewCache() *Cache { return newCache(0, nil) }

// newCache returns a cache for a store whose ended capsules are kept for
// retention (0: for ever): entries are trusted for the shorter of the
// retention and 10 minutes. now is the clock (nil: the real one).
func newCache(retention time.Duration, now func() time.Time) *Cache {
	maxAge := cacheMaxAge
	if retention > 0 && retention < maxAge {
		maxAge = retention
	}
	c := &Cache{m: make(map[string]cacheEntry), caps: make(map[string]parsedCapsule), maxAge: maxAge, now: now, age: time.Since}
	if now == nil {
		c.now = time.Now
	} else {
		c.age = func(at time.Time) time.Duration { return now().Sub(at) }
	}
	return c
}

// fresh says whether an entry written at at may still be trusted.
func (c *Cache) fresh(at time.Time) bool { return c.age(at) < c.maxAge }

// Trusted returns the decoded capsule of key if body is byte for byte the
// bytes this process holds for it — bytes RECEPTION accepted, or read back
// from what it kept. A phase message's body is never decoded on its own
// authority: anyone who may publish on a phase subject could have written
// it. The result is shared: read only.
func (c *Cache) Trusted(key string, body []byte) (*capsule.Capsule, bool) {
	c.mu.Lock()
	pc, ok := c.caps[key]
	c.mu.Unlock()
	if ok && c.fresh(pc.at) && bytes.Equal(pc.raw, body) {
		return pc.c, true
	}
	return nil, false
}

// Capsule returns the bytes this process holds for key and their decoded
// capsule: bytes RECEPTION accepted, or read back from what it kept. A key
// may be forgotten (retention) and accepted again with other bytes, so the
// caller checks the capsule's digest against the checkpoint's. The result is
// shared: read only.
func (c *Cache) Capsule(key string) ([]byte, *capsule.Capsule, bool) {
	c.mu.Lock()
	pc, ok := c.caps[key]
	c.mu.Unlock()
	if !ok || !c.fresh(pc.at) {
		return nil, nil, false
	}
	return pc.raw, pc.c, true
}

// Seed remembers the capsule decoded from raw, bytes RECEPTION accepted (or
// read back from what it kept), so the next phase neither reads nor decodes
// them again. Neither raw nor dec may change afterwards: the cache keeps
// them, not copies: RECEPTION's raw is its message's body and a read's a KV
// value, buffers nats.go made for them alone and never reuses (a copy was
// an allocation of the capsule's size, once a capsule).
func (c *Cache) Seed(key string, raw []byte, dec *capsule.Capsule) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.caps[key]; !ok && len(c.caps) >= cacheSize {
		for k := range c.caps {
			delete(c.caps, k)
			break
		}
	}
	c.caps[key] = parsedCapsule{raw: raw, c: dec, at: c.now()}
}

// Get returns the checkpoint this process wrote last for key, if it has it.
func (c *Cache) Get(key string) (*capsule.Checkpoint, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || !c.fresh(e.at) {
		return nil, 0, false
	}
	return e.cp, e.rev, true
}

// Put stores a copy of cp; ended capsules are forgotten.
func (c *Cache) Put(cp *capsule.Checkpoint, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cp.State.Status.Terminal() {
		delete(c.m, cp.Key)
		delete(c.caps, cp.Key)
		return
	}
	if _, ok := c.m[cp.Key]; !ok && len(c.m) >= cacheSize {
		for k := range c.m { // map order is random: a random eviction
			delete(c.m, k)
			break
		}
	}
	c.m[cp.Key] = cacheEntry{cp: cp, rev: rev, at: c.now()}
}
