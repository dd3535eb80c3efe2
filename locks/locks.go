package locks

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/internal/cas"
	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/internal/plainjson"
)

// ErrHeld is matched (errors.Is) by a [*HeldError]: a live lease of another
// holder has the lock.
var ErrHeld = errors.New("locks: held by another holder")

// ErrNotHeld is returned by [Manager.Renew] for a lock the holder no longer
// holds: it was released, or it expired and another holder took it over.
var ErrNotHeld = errors.New("locks: not held by this holder")

// HeldError reports the live lease that refused an acquisition.
type HeldError struct {
	Path      string
	Holder    string
	Owner     string
	ExpiresAt time.Time
}

// Error names the path and its current holder.
func (e *HeldError) Error() string {
	return fmt.Sprintf("locks: %q held by %s (owner %s) until %s",
		e.Path, e.Holder, e.Owner, e.ExpiresAt.Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrHeld) true for a *HeldError.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// AcquireError names the path [Manager.AcquireAll] failed on; it is what
// EXECUTION reports as lock_acquisition_failed:<path>.
type AcquireError struct {
	Path string
	Err  error
}

// Error names the path and the cause.
func (e *AcquireError) Error() string {
	return fmt.Sprintf("locks: acquire all: failed on %q: %v", e.Path, e.Err)
}

// Unwrap returns the cause, often a [*HeldError].
func (e *AcquireError) Unwrap() error { return e.Err }

// Config configures a [Manager].
type Config struct {
	// Bucket is the KV bucket holding the locks. Defaults to "SAGA_LOCKS".
	Bucket string
	// Lease is how long a lock lives without renewal. Defaults to 30s.
	Lease time.Duration
	// Owner identifies this sagad instance in the locks it writes.
	// Defaults to "<hostname>/<pid>".
	Owner string
	// Replicas is the bucket's replica count. Defaults to 1.
	Replicas int
	// Storage is the bucket's storage. Defaults to jetstream.FileStorage.
	Storage jetstream.StorageType
	// Now is the clock leases are computed and checked with. Defaults to
	// time.Now; tests set a fake one.
	Now func() time.Time
	// Writes bounds and observes every write to the bucket. Nil bounds
	// each by jspub.DefaultTimeout.
	Writes *jspub.Writes
	// Corrupt reports the lock values sagad did not write, which are taken
	// over as free locks. Nil reports nothing.
	Corrupt *corrupt.Reporter
}

func (c Config) withDefaults() Config {
	if c.Bucket == "" {
		c.Bucket = "SAGA_LOCKS"
	}
	if c.Writes != nil && c.Writes.Target == "" {
		c.Writes = c.Writes.On(c.Bucket) // its failures are told apart (package health)
	}
	if c.Lease == 0 {
		c.Lease = 30 * time.Second
	}
	if c.Owner == "" {
		host, _ := os.Hostname()
		c.Owner = host + "/" + strconv.Itoa(os.Getpid())
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	if c.Lease <= 0 {
		return fmt.Errorf("locks: lease must be positive, got %s", c.Lease)
	}
	if c.Replicas < 1 {
		return fmt.Errorf("locks: replicas must be at least 1, got %d", c.Replicas)
	}
	return nil
}

// Manager takes, renews and releases locks in the KV bucket. It is safe for
// concurrent use, and any number of Managers (in any number of processes) may
// share a bucket.
type Manager struct {
	kv  jetstream.KeyValue
	nc  *nats.Conn // the hot path's writes (see internal/jspub); nil with a JetStream domain
	cfg Config
	// reads reads a lock with its deadline in the request (a lock is read
	// at RECEPTION and at EXECUTION of every capsule that names paths).
	reads *jspub.KVReader

	// held remembers the revision of each lock this Manager wrote last, so
	// the common release is one compare-and-set purge instead of a read and
	// a write, and the revision of the purge marker each release left, so
	// taking the lock again is one compare-and-set too. A stale entry only
	// makes that write conflict; the slow path then reads the lock.
	mu   sync.Mutex
	held map[string]heldRev

	// mirror answers RECEPTION's "is it free?" without a read (Mirror).
	mirror mirror
}

// heldRev is a lock's revision as this Manager wrote it: held by holder,
// or, with holder "", its release's purge marker, left at released.
type heldRev struct {
	holder   string
	rev      uint64
	released time.Time
}

// maxHeld bounds the revisions remembered.
const maxHeld = 8192

func (m *Manager) remember(path, holder string, rev uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held == nil {
		m.held = make(map[string]heldRev)
	}
	if _, ok := m.held[path]; !ok && len(m.held) >= maxHeld {
		for k := range m.held {
			delete(m.held, k)
			break
		}
	}
	m.held[path] = heldRev{holder: holder, rev: rev}
}

func (m *Manager) forget(path string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.held, path)
}

// create writes a free lock: over the purge marker this Manager's release
// left while it lives (it expires after releasedTTL; then the key has no
// entry), else as a new key.
func (m *Manager) create(ctx context.Context, path string, b []byte) (uint64, error) {
	if m.nc == nil {
		return jspub.Write(ctx, m.cfg.Writes, func(ctx context.Context) (uint64, error) { return m.kv.Create(ctx, Key(path), b) })
	}
	var last uint64
	m.mu.Lock()
	if h, ok := m.held[path]; ok && h.holder == "" && time.Since(h.released) < releasedTTL/2 {
		last = h.rev
	}
	m.mu.Unlock()
	return m.cfg.Writes.KVUpdate(ctx, m.nc, m.kv, Key(path), b, last)
}

// purge releases path's lock at revision rev, which holder wrote.
func (m *Manager) purge(ctx context.Context, path, holder string, rev uint64) error {
	if m.nc == nil {
		err := m.cfg.Writes.Do(ctx, func(ctx context.Context) error {
			return m.kv.Purge(ctx, Key(path), jetstream.LastRevision(rev), jetstream.PurgeTTL(releasedTTL))
		})
		if err == nil {
			m.forget(path)
		}
		return err
	}
	marker, err := m.cfg.Writes.KVPurge(ctx, m.nc, m.kv, Key(path), rev, releasedTTL)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// Unless the lock was written again meanwhile (it is then that write's).
	if h, ok := m.held[path]; ok && h.holder == holder && h.rev == rev {
		m.held[path] = heldRev{rev: marker, released: time.Now()}
	}
	return nil
}

func (m *Manager) remembered(path, holder string) (uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.held[path]
	return h.rev, ok && h.holder == holder
}

// New returns a Manager on cfg.Bucket, creating the bucket or updating its
// configuration as needed.
func New(ctx context.Context, js jetstream.JetStream, cfg Config) (*Manager, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      cfg.Bucket,
		Description: "sagad resource locks (Rule 17)",
		History:     1,
		// Every write of a live lock is at most a lease old (holders renew
		// it), so entries far older than the lease are expired locks or the
		// delete markers of released ones: dropping them keeps the bucket
		// from growing with every path ever locked.
		TTL: bucketTTL(cfg.Lease),
		// Released locks leave a purge marker that lives this long, so the
		// bucket does not index every path ever locked for bucketTTL.
		LimitMarkerTTL: releasedTTL,
		Replicas:       cfg.Replicas,
		Storage:        cfg.Storage,
	})
	if err != nil {
		return nil, fmt.Errorf("locks: bucket %s: %w", cfg.Bucket, err)
	}
	nc := jspub.Conn(js)
	// The bucket is sagad's own, made by the KV client: it allows direct
	// gets and mirrors nothing.
	return &Manager{kv: kv, nc: nc, cfg: cfg, reads: jspub.NewKVReader(nc, kv, cfg.Writes, true)}, nil
}

// Key returns the KV key of path's lock: the lowercase hex SHA-256 of path.
func Key(path string) string {
	// A path fits the stack buffer: hashing it allocates nothing but the
	// key (a conversion to []byte was a copy on the heap, every lock
	// taken, released and looked up).
	var buf [256]byte
	sum := sha256.Sum256(append(buf[:0], path...))
	var h [2 * sha256.Size]byte
	hex.Encode(h[:], sum[:])
	return string(h[:]) // one allocation: EncodeToString made two
}

// lease is the JSON value of a lock.
type lease struct {
	Path       string    `json:"path"`
	Holder     string    `json:"holder"`
	Owner      string    `json:"owner"`
	AcquiredAt time.Time `json:"acquired_at"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// encodeLease is json.Marshal(l), written directly where the bytes are
// certain to be the same (TestEncodeLeaseAsMarshal): every free lock is
// taken with it.
func encodeLease(l *lease) ([]byte, error) {
	if !plainjson.Plain(l.Path) || !plainjson.Plain(l.Holder) || !plainjson.Plain(l.Owner) {
		return json.Marshal(l)
	}
	b := make([]byte, 0, 128+len(l.Path)+len(l.Holder)+len(l.Owner))
	b = append(b, `{"path":"`...)
	b = append(b, l.Path...)
	b = append(b, `","holder":"`...)
	b = append(b, l.Holder...)
	b = append(b, `","owner":"`...)
	b = append(b, l.Owner...)
	b = append(b, `","acquired_at":`...)
	b, ok1 := plainjson.AppendTime(b, l.AcquiredAt)
	b = append(b, `,"expires_at":`...)
	b, ok2 := plainjson.AppendTime(b, l.ExpiresAt)
	if !ok1 || !ok2 {
		return json.Marshal(l)
	}
	return append(b, '}'), nil
}

// live reports whether l still holds its lock at now.
func (l *lease) live(now time.Time) bool { return !l.ExpiresAt.Before(now) }

// TryAcquire takes the lock on path for holder, or renews it if holder
// already holds it, so a redelivered capsule re-acquiring its own lock
// succeeds. A lock whose lease has expired is taken over. If another holder's
// lease is live it fails with a [*HeldError] naming that holder.
func (m *Manager) TryAcquire(ctx context.Context, path, holder string) error {
	if err := checkArgs(path, holder); err != nil {
		return err
	}
	// Fast path: a free lock is taken with one write, no read first: a
	// create, or a compare-and-set on the purge marker this Manager's
	// release left.
	now := m.cfg.Now()
	if b, err := encodeLease(&lease{Path: path, Holder: holder, Owner: m.cfg.Owner, AcquiredAt: now, ExpiresAt: now.Add(m.cfg.Lease)}); err == nil {
		if rev, err := m.create(ctx, path, b); err == nil {
			m.remember(path, holder, rev)
			m.mirror.hold(path)
			return nil
		} else if !cas.Conflict(err) {
			return fmt.Errorf("locks: acquire %q: %w", path, err)
		}
	}
	err := m.mutate(ctx, path, func(cur *lease, now time.Time) (*lease, error) {
		next := &lease{Path: path, Holder: holder, Owner: m.cfg.Owner, AcquiredAt: now, ExpiresAt: now.Add(m.cfg.Lease)}
		switch {
		case cur == nil:
		case cur.Holder == holder:
			next.AcquiredAt = cur.AcquiredAt
		case cur.live(now):
			return nil, &HeldError{Path: path, Holder: cur.Holder, Owner: cur.Owner, ExpiresAt: cur.ExpiresAt}
		}
		return next, nil
	})
	if err != nil && !errors.Is(err, ErrHeld) {
		return fmt.Errorf("locks: acquire %q: %w", path, err)
	}
	if err == nil {
		m.mirror.hold(path)
	}
	return err
}

// AcquireAll takes every lock in paths for holder, all or nothing. It takes
// them in sorted order without duplicates, so two capsules needing
// overlapping sets cannot each hold a part the other waits for. On the first
// failure it releases every lock of holder among paths (including ones it held
// before the call: the caller is giving up on all of them) and returns an
// [*AcquireError] naming the path that failed.
func (m *Manager) AcquireAll(ctx context.Context, paths []string, holder string) error {
	for _, path := range sortedUnique(paths) {
		if err := m.TryAcquire(ctx, path, holder); err != nil {
			return m.abandon(ctx, paths, holder, &AcquireError{Path: path, Err: err})
		}
	}
	return nil
}

// releaseTimeout bounds the cleanup of a failed AcquireAll.
const releaseTimeout = 5 * time.Second

// abandon releases holder's locks among paths after a failed AcquireAll and
// returns cause, joined with any release error. It releases even when ctx is
// what failed: leaving the locks to expire would block other capsules for a
// whole lease for nothing.
func (m *Manager) abandon(ctx context.Context, paths []string, holder string, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := m.ReleaseAll(ctx, paths, holder); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}

// Release deletes the lock on path if holder holds it (even if its lease has
// expired and nobody took it over yet). Releasing a lock that is free or held
// by another holder is a no-op, so Release is idempotent.
func (m *Manager) Release(ctx context.Context, path, holder string) error {
	if err := checkArgs(path, holder); err != nil {
		return err
	}
	if rev, ok := m.remembered(path, holder); ok {
		err := m.purge(ctx, path, holder, rev)
		if err == nil {
			return nil
		}
		if !cas.Conflict(err) && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("locks: release %q: %w", path, err)
		}
	}
	m.forget(path)
	err := m.mutate(ctx, path, func(cur *lease, _ time.Time) (*lease, error) {
		if cur == nil || cur.Holder != holder {
			return cur, nil
		}
		return nil, nil
	})
	if err != nil {
		return fmt.Errorf("locks: release %q: %w", path, err)
	}
	return nil
}

// ReleaseAll releases every lock in paths that holder holds. It tries them
// all and returns the errors joined.
func (m *Manager) ReleaseAll(ctx context.Context, paths []string, holder string) error {
	var errs []error
	for _, path := range sortedUnique(paths) {
		errs = append(errs, m.Release(ctx, path, holder))
	}
	return errors.Join(errs...)
}

// Renew extends the lease of every lock in paths to now plus the lease, for
// executions that outlast it. It renews all it can and returns the errors
// joined; a lock holder no longer holds fails with [ErrNotHeld] (and
// [*HeldError] if another holder took it over) and is not taken back.
func (m *Manager) Renew(ctx context.Context, paths []string, holder string) error {
	var errs []error
	for _, path := range sortedUnique(paths) {
		if err := checkArgs(path, holder); err != nil {
			errs = append(errs, err)
			continue
		}
		err := m.mutate(ctx, path, func(cur *lease, now time.Time) (*lease, error) {
			switch {
			case cur == nil:
				return nil, ErrNotHeld
			case cur.Holder != holder:
				return nil, fmt.Errorf("%w: %w", ErrNotHeld, &HeldError{Path: path, Holder: cur.Holder, Owner: cur.Owner, ExpiresAt: cur.ExpiresAt})
			}
			next := *cur
			next.Owner = m.cfg.Owner
			next.ExpiresAt = now.Add(m.cfg.Lease)
			return &next, nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("locks: renew %q: %w", path, err))
		}
	}
	return errors.Join(errs...)
}

// Holder returns the holder of path's lock, or "" if it is free or its lease
// has expired.
func (m *Manager) Holder(ctx context.Context, path string) (string, error) {
	cur, _, err := m.get(ctx, path)
	if err != nil {
		return "", fmt.Errorf("locks: holder of %q: %w", path, err)
	}
	if cur == nil || !cur.live(m.cfg.Now()) {
		return "", nil
	}
	return cur.Holder, nil
}

// Available reports whether holder could take path's lock now: it is free,
// expired or already holder's. RECEPTION halts with lock_unavailable:<path>
// when it is not. The answer can change at once; only [Manager.TryAcquire]
// decides. While [Manager.Mirror] runs, a path the mirror holds no entry
// for is free without a read; any other answer is read.
func (m *Manager) Available(ctx context.Context, path, holder string) (bool, error) {
	if m.mirror.free(path) {
		return true, nil
	}
	h, err := m.Holder(ctx, path)
	if err != nil {
		return false, err
	}
	return h == "" || h == holder, nil
}

// mutate is the compare-and-set loop every write goes through (jspub.Mutate,
// under sagad's one retry policy). It reads the lock (nil if free), asks decide what
// it should become and writes that only if the lock is still at the revision
// read, reading again when another writer got in between. decide returns the
// lease to store, nil to delete the lock, cur itself to leave it as it is, or
// an error to stop with.
func (m *Manager) mutate(ctx context.Context, path string, decide func(cur *lease, now time.Time) (*lease, error)) error {
	var op jspub.Op // of the attempt that went through
	next, rev, err := jspub.Mutate(ctx, m.kv, m.cfg.Writes, Key(path),
		func(ctx context.Context) (*lease, uint64, error) { return m.get(ctx, path) },
		func(cur *lease) (*lease, jspub.Op, error) {
			next, err := decide(cur, m.cfg.Now())
			switch {
			case err != nil || next == cur:
				op = jspub.Keep
			case next == nil:
				op = jspub.Delete
			default:
				op = jspub.Put
			}
			return next, op, err
		})
	switch {
	case err != nil:
		return err
	case op == jspub.Delete:
		m.forget(path)
	case op == jspub.Put:
		m.remember(path, next.Holder, rev)
	}
	return nil
}

// get reads path's lock and its revision; a free lock is (nil, 0, nil). A
// value sagad did not write there (not a lease, or the lease of another
// path: a JetStream publish acknowledgement sent onto the key by a client
// that named it as its reply subject is one) holds nothing: it is reported
// once and read as a free lock at its revision (nil, rev, nil), which the
// next acquisition replaces. Taking it for held would let whoever wrote it
// stall every capsule that needs the path; failing would retry forever.
func (m *Manager) get(ctx context.Context, path string) (*lease, uint64, error) {
	key := Key(path)
	v, rev, err := m.reads.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	l, err := decodeLease(path, v)
	if err != nil {
		m.cfg.Corrupt.Report(corrupt.New(m.cfg.Bucket, key, rev, err), "the lock is taken for free and replaced by the next acquisition")
		return nil, rev, nil
	}
	return l, rev, nil
}

func checkArgs(path, holder string) error {
	switch {
	case path == "":
		return errors.New("locks: empty path")
	case holder == "":
		return fmt.Errorf("locks: %q: empty holder", path)
	}
	return nil
}

// sortedUnique returns paths sorted without duplicates, leaving paths as is.
// Most capsules lock one path: that is returned as it is, not copied.
func sortedUnique(paths []string) []string {
	if len(paths) <= 1 {
		return paths
	}
	return slices.Compact(slices.Sorted(slices.Values(paths)))
}

// releasedTTL is how long the marker of a released lock stays.
const releasedTTL = time.Second

// bucketTTL is how long a lock entry outlives its last write: long past any
// lease, so a live lock is never dropped.
func bucketTTL(lease time.Duration) time.Duration {
	return max(10*lease, 10*time.Minute)
}

// decodeLease is the one decoder of a lock value: the lease of path, as
// sagad writes it (every member known, a holder and an owner).
func decodeLease(path string, b []byte) (*lease, error) {
	var l lease
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("not a lease: %w", err)
	}
	if dec.More() {
		return nil, errors.New("not a lease: more than one JSON value")
	}
	if l.Path != path {
		return nil, fmt.Errorf("the lease of %q, not of %q", l.Path, path)
	}
	if l.Holder == "" || l.Owner == "" || l.ExpiresAt.IsZero() {
		return nil, errors.New("a lease without holder, owner or expiry")
	}
	return &l, nil
}
