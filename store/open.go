package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/locks"
	"github.com/sagad/sagad/rules"
)

// ErrNoTopology means the streams and buckets sagad creates are missing:
// no sagad has run against this NATS system yet.
var ErrNoTopology = errors.New("sagad's streams and buckets are missing (is sagad running against this NATS?)")

// Topology configures the streams, consumers and buckets [Ensure] creates.
type Topology struct {
	// Replicas of every stream and bucket. Defaults to 1.
	Replicas int
	// Storage of every stream and bucket. Defaults to file storage.
	Storage jetstream.StorageType
	// AckWait of the phase and completion consumers. Defaults to 30s.
	AckWait time.Duration
	// DuplicateWindow is the de-duplication window of the streams. Defaults to 2m.
	DuplicateWindow time.Duration
	// Retention is how long an ended capsule is kept (see pipeline.Config).
	Retention time.Duration
	// LockLease is the lease of resource locks. Defaults to the locks package's.
	LockLease time.Duration
	// Workspace is the root under which file: refs resolve. Defaults to ".".
	Workspace string
	// KVBuckets lists the KV buckets kv: refs may name (see [Resolver]).
	// Defaults to none: no kv: ref resolves.
	KVBuckets []string
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Writes bounds and observes every write to these streams and buckets.
	// Nil bounds each by jspub.DefaultTimeout.
	Writes *jspub.Writes
	// Migrate lets [Ensure] change settings of existing streams and buckets
	// that differ from these (replicas, retention...). Without it Ensure
	// refuses with a [*DriftError] and changes nothing; upgrades (see
	// [Change.Upgrade]) and creations are made either way.
	Migrate bool
	// Logger receives one line per change Ensure makes to what exists.
	// Defaults to discarding.
	Logger *slog.Logger
	// Corrupt reports the values of sagad's buckets that sagad did not
	// write, met where no error can carry them (a list, a lock taken over).
	// Nil reports nothing.
	Corrupt *corrupt.Reporter
	// Quota bounds what each producer may have waiting in SAGA_INTAKE.
	// Zero fields take [IntakeQuota]'s defaults.
	Quota IntakeQuota
}

// IntakeQuota is the intake a producer may have waiting for RECEPTION.
// JetStream enforces it on SAGA_INTAKE itself: a publish over it gets an
// error acknowledgement and nothing is stored. Every producer publishes on
// its own subject (saga.intake.<producer>), so a per-subject limit is a
// per-producer one.
type IntakeQuota struct {
	// MaxPending is how many intake messages one producer may have waiting
	// (MaxMsgsPerSubject with DiscardNewPerSubject). Defaults to
	// [DefaultIntakeMaxPending].
	MaxPending int64
	// MaxMsgBytes bounds one intake message, headers included. Defaults to
	// [DefaultIntakeMaxMsgBytes].
	MaxMsgBytes int32
	// MaxBytes bounds everything waiting in SAGA_INTAKE, all producers
	// together (DiscardNew). Defaults to unbounded: JetStream reserves a
	// stream's MaxBytes from the server's storage when the stream is
	// created, so a default would refuse to start on a small server.
	MaxBytes int64
}

// Intake quota defaults: a producer may queue 256 capsules, each at most
// 1 MiB (twice RECEPTION's 512 KiB limit, as sagactl's input bound: larger
// capsules still halt capsule_too_large, with their bytes kept), so its
// waiting intake is at most 256 MiB; past it, the producer goes at the
// rate RECEPTION takes its intake (pipeline.IntakeRate). 256 is well below
// RECEPTION's 1024 acks pending: a producer whose backlog RECEPTION delays
// holds at most that many deliveries, and the others' capsules are
// delivered past them.
const (
	DefaultIntakeMaxPending  = 256
	DefaultIntakeMaxMsgBytes = 1 << 20
)

func (q IntakeQuota) withDefaults() IntakeQuota {
	if q.MaxPending <= 0 {
		q.MaxPending = DefaultIntakeMaxPending
	}
	if q.MaxMsgBytes <= 0 {
		q.MaxMsgBytes = DefaultIntakeMaxMsgBytes
	}
	if q.MaxBytes <= 0 {
		q.MaxBytes = -1
	}
	return q
}

func (t Topology) withDefaults() Topology {
	if t.Replicas <= 0 {
		t.Replicas = 1
	}
	if t.AckWait <= 0 {
		t.AckWait = 30 * time.Second
	}
	if t.DuplicateWindow <= 0 {
		t.DuplicateWindow = 2 * time.Minute
	}
	if t.Workspace == "" {
		t.Workspace = "."
	}
	if t.Now == nil {
		t.Now = time.Now
	}
	t.Quota = t.Quota.withDefaults()
	return t
}

// Store is sagad's JetStream store: every stream, bucket, name and subject
// the saga uses, and the writes that carry out a checkpoint's effects
// ([Store.Emit]). It is safe for concurrent use.
type Store struct {
	js jetstream.JetStream
	// Checkpoints is the checkpoint per capsule key.
	Checkpoints *Checkpoints
	// Continuations is the record per paused capsule.
	Continuations *Continuations
	// Artifacts stores executor results (phases.Artifacts).
	Artifacts *Artifacts
	// Locks are the resource locks (Rule 17).
	Locks *locks.Manager
	// Budgets are the wave budgets (Rule 16).
	Budgets *budget.Tracker
	// Chains holds the compositions sagad assigned (nil on a store opened
	// before the bucket existed).
	Compositions *Compositions
	// Cache holds what this process wrote and decoded last.
	Cache *Cache

	capsules jetstream.KeyValue
	// capsulesStream is SAGA_CAPSULES's stream, for the headers of its
	// entries (the KV client does not return them).
	capsulesStream jetstream.Stream
	artifacts      jetstream.ObjectStore
	retention      time.Duration
	workspace      string
	kvBuckets      map[string]bool
	// waveHook is called when a wave may have room for a waiting capsule
	// (see OnWaveChange).
	waveHook atomic.Pointer[func()]
	// to is the write policy per stream and bucket written (setWrites).
	to map[string]*jspub.Writes
}

// Ensure creates (idempotently) every stream, consumer and bucket sagad needs
// and returns the store over them. Every sagad runs it at start.
func Ensure(ctx context.Context, js jetstream.JetStream, cfg Topology) (*Store, error) {
	cfg = cfg.withDefaults()
	if jspub.Conn(js) == nil {
		// The hot path writes to the buckets' own subjects (internal/jspub).
		return nil, errors.New("JetStream domains are not supported: connect without one")
	}
	// Compare before any write: a sagad started with other flags must not
	// weaken what the others run on (fewer replicas, shorter retention).
	changes, err := PlanTopology(ctx, js, cfg)
	if err != nil {
		return nil, err
	}
	if err := cfg.allow(changes); err != nil {
		return nil, err
	}
	st, err := ensureTopology(ctx, keepSubjects{js}, cfg)
	if err != nil {
		return nil, err
	}
	lm, err := locks.New(ctx, js, locks.Config{Lease: cfg.LockLease, Replicas: cfg.Replicas, Storage: cfg.Storage, Now: cfg.Now, Writes: cfg.Writes, Corrupt: cfg.Corrupt})
	if err != nil {
		return nil, err
	}
	bt, err := budget.New(ctx, js, budget.Config{Replicas: cfg.Replicas, Storage: cfg.Storage, Writes: cfg.Writes, Corrupt: cfg.Corrupt})
	if err != nil {
		return nil, err
	}
	s := newStore(js, st, lm, bt, cfg.Retention, cfg.Workspace)
	s.kvBuckets = make(map[string]bool, len(cfg.KVBuckets))
	for _, b := range cfg.KVBuckets {
		s.kvBuckets[b] = true
	}
	s.setWrites(cfg.Writes)
	s.Checkpoints.Corrupt = cfg.Corrupt
	if s.Compositions != nil {
		// Not fatal: unscanned, every version 4 id is looked up, as before.
		sctx, cancel := context.WithTimeout(ctx, scanTimeout)
		if err := s.Compositions.ScanLegacy(sctx, cfg.Retention); err != nil && cfg.Logger != nil {
			cfg.Logger.Warn("version 4 step ids stay looked up", "error", err)
		}
		cancel()
	}
	return s, nil
}

// allow returns a [*DriftError] unless every change is an upgrade or
// Migrate asks for them, and logs each change it lets through.
func (t Topology) allow(changes []Change) error {
	var refused []Change
	for _, c := range changes {
		if !c.Upgrade && !t.Migrate {
			refused = append(refused, c)
		}
	}
	if len(refused) > 0 {
		return &DriftError{Changes: refused}
	}
	log := t.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, c := range changes {
		attrs := []any{"kind", c.Kind, "name", c.Name, "setting", c.Setting, "from", c.Found, "to", c.Asked}
		if c.Upgrade {
			log.Info("topology upgrade", attrs...)
		} else {
			log.Warn("topology changed (--migrate)", attrs...)
		}
	}
	return nil
}

// Open binds to the topology a sagad created, for operator actions and
// maintenance run outside sagad (tests, tools). It creates nothing but the
// locks and budget buckets, which are created on first use anyway.
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	kv := func(name string) (jetstream.KeyValue, error) {
		b, err := js.KeyValue(ctx, name)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, ErrNoTopology
		}
		return b, err
	}
	st := &stores{}
	var err error
	if st.checkpoints, err = kv(CheckpointsBucket); err != nil {
		return nil, err
	}
	if st.capsules, err = kv(CapsulesBucket); err != nil {
		return nil, err
	}
	if st.capsulesStream, err = js.Stream(ctx, "KV_"+CapsulesBucket); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", CapsulesBucket, err)
	}
	if st.continuations, err = kv(ContinuationsBucket); err != nil {
		return nil, err
	}
	if st.artifacts, err = js.ObjectStore(ctx, ArtifactsBucket); err != nil {
		return nil, fmt.Errorf("object store %s: %w", ArtifactsBucket, err)
	}
	// A topology an older sagad made has no records bucket: every record
	// is then an object, written and read as such.
	if st.artifactRecords, err = js.KeyValue(ctx, ArtifactRecordsBucket); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("bucket %s: %w", ArtifactRecordsBucket, err)
	}
	if st.chains, err = js.KeyValue(ctx, CompositionsBucket); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("bucket %s: %w", CompositionsBucket, err)
	}
	lm, err := locks.New(ctx, js, locks.Config{})
	if err != nil {
		return nil, err
	}
	bt, err := budget.New(ctx, js, budget.Config{})
	if err != nil {
		return nil, err
	}
	// A capsule ended through this store expires like one sagad ends.
	var retention time.Duration
	if status, err := st.checkpoints.Status(ctx); err == nil {
		if d, err := time.ParseDuration(status.Metadata()[RetentionMetadata]); err == nil && d > 0 {
			retention = d
		}
	}
	return newStore(js, st, lm, bt, retention, "."), nil
}

func newStore(js jetstream.JetStream, st *stores, lm *locks.Manager, bt *budget.Tracker, retention time.Duration, workspace string) *Store {
	s := &Store{
		js:             js,
		Checkpoints:    &Checkpoints{kv: st.checkpoints, js: js, ttl: retention},
		Continuations:  &Continuations{kv: st.continuations},
		Artifacts:      newArtifactStore(st.artifacts, st.artifactRecords, js),
		Locks:          lm,
		Budgets:        bt,
		Cache:          newCache(retention, nil),
		capsules:       st.capsules,
		capsulesStream: st.capsulesStream,
		artifacts:      st.artifacts,
		retention:      retention,
		workspace:      workspace,
	}
	if st.chains != nil {
		s.Compositions = &Compositions{kv: st.chains, js: js}
	}
	return s
}

// JetStream is the JetStream context the store writes with.
func (s *Store) JetStream() jetstream.JetStream { return s.js }

// Retention is how long an ended capsule is kept (0: forever).
func (s *Store) Retention() time.Duration { return s.retention }

// Resolver tells whether context refs and targets exist (REALITY_ANCHOR),
// under workspace for file: refs.
func (s *Store) Resolver() *Resolver {
	return &Resolver{checkpoints: s.Checkpoints, workspace: s.workspace, js: s.js, artifacts: s.Artifacts, allowed: s.kvBuckets}
}

// ResolveFinal turns artifact:<capsule_id>/final into the ref of that
// capsule's final artifact (see [Checkpoints.ResolveFinal]).
func (s *Store) ResolveFinal(ctx context.Context, ref string) (string, bool, error) {
	return s.Checkpoints.ResolveFinal(ctx, ref)
}

// Facts answers the constitution's questions about other capsules (rules.Facts).
func (s *Store) Facts() rules.Facts {
	return &facts{checkpoints: s.Checkpoints, capsules: s.capsules, budgets: s.Budgets}
}

// Raw returns the capsule's bytes as RECEPTION kept them, and the capsule
// they decode to (nil for bytes that are no capsule).
func (s *Store) Raw(ctx context.Context, key string) ([]byte, *capsule.Capsule, error) {
	rctx, cancel := readCtx(ctx, s.writes())
	e, err := s.capsules.Get(rctx, key)
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("capsule bytes of %s: %w", key, err)
	}
	c, _ := DecodeCapsule(e.Value())
	return e.Value(), c, nil
}

// KeepBytes keeps capsule bytes under key as RECEPTION received them, once:
// an error wrapping jetstream.ErrKeyExists says the key holds bytes already
// (a redelivered intake message must not erase what its first delivery
// recorded on them, the outcome mark).
func (s *Store) KeepBytes(ctx context.Context, key string, raw []byte) error {
	_, err := s.writesTo(CapsulesBucket).KVCreate(ctx, jspub.Conn(s.js), s.capsules, key, raw)
	return err
}

// RenewBytes replaces the bytes under key: a new run of a capsule whose
// earlier run ended and was forgotten must not carry that run's outcome mark
// and time to live.
func (s *Store) RenewBytes(ctx context.Context, key string, raw []byte) error {
	_, err := jspub.Write(ctx, s.writesTo(CapsulesBucket), func(ctx context.Context) (uint64, error) { return s.capsules.Put(ctx, key, raw) })
	return err
}

// KeptBytes compares the bytes kept under key with digest, and reports
// whether they carry the outcome mark of a run that ended.
func (s *Store) KeptBytes(ctx context.Context, key, digest string) (same, ended bool, err error) {
	rctx, cancel := readCtx(ctx, s.writes())
	m, err := s.capsulesStream.GetLastMsgForSubject(rctx, capsuleSubject(key))
	cancel()
	if err != nil {
		return false, false, fmt.Errorf("read kept capsule %s: %w", key, err)
	}
	d, err := capsule.Digest(m.Data)
	if err != nil {
		return false, false, nil
	}
	return d == digest, m.Header.Get(HeaderOutcomeSent) != "", nil
}

// Accepted returns the bytes RECEPTION kept for key, the capsule they decode
// to, and whether body (a phase message's) was exactly those bytes. sagad's
// phase messages carry no body (an empty body is "the same"): their headers
// name the capsule, and what it is comes from this process's cache or from
// SAGA_CAPSULES, which only sagad writes. A body (from an earlier version, or
// a forger) only decides whether the cache may answer: whatever a message
// carries, a phase acts on the capsule RECEPTION accepted, and its outcome
// carries those bytes. The cache is keyed by capsule key alone, so the
// caller checks the capsule against its checkpoint's digest (a key forgotten
// and accepted again is another capsule) and reads again with [Store.Kept]
// when they differ.
func (s *Store) Accepted(ctx context.Context, key string, body []byte) (raw []byte, c *capsule.Capsule, same bool, err error) {
	if len(body) == 0 {
		if raw, c, ok := s.Cache.Capsule(key); ok {
			return raw, c, true, nil
		}
	} else if c, ok := s.Cache.Trusted(key, body); ok {
		return body, c, true, nil
	}
	raw, c, err = s.Kept(ctx, key)
	if err != nil {
		return nil, nil, false, err
	}
	return raw, c, len(body) == 0 || bytes.Equal(raw, body), nil
}

// Kept reads the bytes kept for key from SAGA_CAPSULES, not the cache,
// decodes them and remembers them in the cache.
func (s *Store) Kept(ctx context.Context, key string) (raw []byte, c *capsule.Capsule, err error) {
	rctx, cancel := readCtx(ctx, s.writes())
	e, err := s.capsules.Get(rctx, key)
	cancel()
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil, fmt.Errorf("%w: no capsule bytes kept for %s", ErrNotFound, key)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("capsule bytes of %s: %w", key, err)
	}
	raw = e.Value()
	if c, err = DecodeCapsule(raw); err != nil {
		if strings.HasPrefix(key, "x-") {
			// Bad input RECEPTION kept verbatim, as sagad does.
			return nil, nil, fmt.Errorf("%w: kept bytes of %s: %w", ErrNotACapsule, key, err)
		}
		// Under a capsule's own key, RECEPTION keeps only a capsule.
		return nil, nil, fmt.Errorf("%w: %w", ErrNotACapsule, corrupt.New(corrupt.Capsules, key, e.Revision(), err))
	}
	s.Cache.Seed(key, raw, c)
	return raw, c, nil
}

// ErrNotACapsule: the bytes kept under a key are no capsule (RECEPTION kept
// bad input, which ended there; no phase message can be about it).
var ErrNotACapsule = errors.New("kept bytes are no capsule")
