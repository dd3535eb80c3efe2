package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/internal/cas"
	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/internal/jspub"
)

// CompositionsBucket holds one record per composition run sagad assigned
// (package compose owns what a record holds): keyed by composition id and
// producer, so a composition id is its producer's own namespace and a
// capsule's composition membership (its chain member) is checked against it at
// RECEPTION.
const CompositionsBucket = "SAGA_CHAINS"

// IntakeProducerPrefix is the intake subject a producer account's import
// maps its saga.intake onto: saga.intake.<producer>. The subject is the
// producer's identity: a producer cannot publish on another's.
const IntakeProducerPrefix = IntakeSubject + "."

// HeaderParentToken carries, on an intake message, the call_token of the
// executor call whose worker publishes a child capsule (parent_capsule_id):
// RECEPTION links the child only with it.
const HeaderParentToken = "Saga-Parent-Token"

// ExecutorProducerPrefix starts the intake name of an executor's account
// (executor-<kind>): an executor serving a call may publish child capsules
// (parent_capsule_id) on saga.intake, and only those; RECEPTION refuses
// any other capsule from such a subject. No producer may be named so.
const ExecutorProducerPrefix = "executor-"

// IntakeSubjectOf is producer's intake subject; sagad's own ("") is the
// plain saga.intake.
func IntakeSubjectOf(producer string) string {
	if producer == "" {
		return IntakeSubject
	}
	return IntakeProducerPrefix + producer
}

// ErrCompositionExists is returned by [Compositions.Create] when the run
// exists.
var ErrCompositionExists = errors.New("composition exists")

// MaxProducerLen bounds a producer name.
const MaxProducerLen = 64

var producerName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidProducer reports whether p can name a producer (1 to 64 of
// [A-Za-z0-9_-]); "" is sagad's own intake.
func ValidProducer(p string) bool { return p == "" || producerName.MatchString(p) }

// Compositions reads and writes the composition records' bytes (package
// compose owns what they hold).
type Compositions struct {
	kv jetstream.KeyValue
	// js reads a record from the stream's leader (see get); nil reads
	// through kv.
	js jetstream.JetStream

	// scanned, legacyUntil and legacyTTL say which version 4 step ids are
	// still looked up (see ScanLegacy).
	scanned     atomic.Bool
	legacyUntil atomic.Int64
	legacyTTL   atomic.Int64 // a time.Duration
}

// get is key's record bytes and revision, as the stream's leader has them:
// RECEPTION's membership check runs right after the compose service made
// the record, and the runner's compare-and-set decides on what it reads, so
// neither may be answered by a replica that is behind.
func (c *Compositions) get(ctx context.Context, key string) ([]byte, uint64, error) {
	if c.js != nil {
		return lastFromLeader(ctx, c.js, nil, CompositionsBucket, key)
	}
	e, err := c.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return nil, 0, err
	}
	return e.Value(), e.Revision(), nil
}

func ensureCompositions(ctx context.Context, js jetstream.JetStream, cfg Topology) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: CompositionsBucket, Description: "sagad: composition records (chain steps sagad assigned), per chain and producer",
		Storage: cfg.Storage, Replicas: cfg.Replicas,
		TTL: cfg.Retention, // a chain's steps end within the retention of its creation, or are halted
	})
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", CompositionsBucket, err)
	}
	return kv, nil
}

// compositionKey is run 1's key: the composition id's digest (ids are free
// text) then the producer, so every producer's run 1 of one id is found by
// one prefix.
func compositionKey(id, producer string) string {
	return compositionPrefix(id) + "." + producerToken(producer)
}

// runKey is run's record: run 1 is under [compositionKey], as before runs
// were counted; run n > 1 under compositionKey.<n>, which the producers' listing
// (one token after the prefix) does not see.
func runKey(id, producer string, run int) string {
	if run <= 1 {
		return compositionKey(id, producer)
	}
	return compositionKey(id, producer) + "." + strconv.Itoa(run)
}

func compositionPrefix(id string) string {
	h := sha256.Sum256([]byte(id))
	return hex.EncodeToString(h[:20])
}

func producerToken(p string) string {
	if p == "" {
		return "-"
	}
	if producerName.MatchString(p) {
		return p
	}
	return "x" + hex.EncodeToString([]byte(p))
}

// RunKey names one run of producer's composition ID.
type RunKey struct {
	ID, Producer string
	// Run is the run, from 1 (0 is run 1).
	Run int
}

// Key is the bucket key of k's record.
func (k RunKey) Key() string { return runKey(k.ID, k.Producer, k.Run) }

// StepRef is a step capsule id a write names for the first time, and the
// step's index: it is reserved before the write ([Compositions.IsStepID]).
type StepRef struct {
	ID   string
	Step int
}

// ErrUndecodable is wrapped by a change's error when the record's bytes do
// not decode: [Compositions.Update] reports it as corruption of the record
// (corrupt.ErrCorrupt), which reading again does not mend.
var ErrUndecodable = errors.New("composition record does not decode")

// Create stores the record b of run k unless it exists
// ([ErrCompositionExists]): one compare-and-set, so two sagads composing
// the same run at once assign it once. Its step ids are reserved first.
func (c *Compositions) Create(ctx context.Context, k RunKey, steps []StepRef, b []byte) error {
	if err := c.reserveSteps(ctx, k, steps); err != nil {
		return err
	}
	if err := (*jspub.Writes)(nil).Do(ctx, func(ctx context.Context) error {
		_, err := c.kv.Create(ctx, k.Key(), b)
		return err
	}); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("%w: %s of producer %q", ErrCompositionExists, k.ID, k.Producer)
		}
		return fmt.Errorf("create composition %s: %w", k.ID, err)
	}
	return nil
}

// Get is run k's record bytes and revision, as the stream's leader has
// them; it wraps [ErrNotFound] when there is none.
func (c *Compositions) Get(ctx context.Context, k RunKey) ([]byte, uint64, error) {
	b, rev, err := c.get(ctx, k.Key())
	if errors.Is(err, ErrNotFound) {
		return nil, 0, fmt.Errorf("%w: composition %s run %d of producer %q", ErrNotFound, k.ID, max(k.Run, 1), k.Producer)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("composition %s: %w", k.ID, err)
	}
	return b, rev, nil
}

// Corrupt is the error of run k's record at rev whose bytes do not decode
// (why): a *corrupt.Error of [CompositionsBucket].
func (c *Compositions) Corrupt(k RunKey, rev uint64, why error) error {
	return corrupt.New(CompositionsBucket, k.Key(), rev, why)
}

// ErrNoChange is returned by an [Compositions.Update] change that changes
// nothing: the record is not written.
var ErrNoChange = errors.New("no change")

// Update applies change to run k's record bytes with one compare-and-set
// under sagad's one retry policy (cas.Retry: read again from the stream's
// leader and change again on a concurrent write), and returns the bytes as
// stored. change returns the new bytes and the step ids they name for the
// first time (a loop's new round), reserved before the write; returning
// [ErrNoChange] writes nothing and returns the bytes as read, and an
// error wrapping [ErrUndecodable] is corruption, not retried.
func (c *Compositions) Update(ctx context.Context, k RunKey, change func(b []byte) ([]byte, []StepRef, error)) ([]byte, error) {
	var out []byte
	err := cas.Retry(ctx, func(ctx context.Context) error {
		b, rev, err := c.Get(ctx, k)
		if err != nil {
			return err
		}
		nb, fresh, err := change(b)
		switch {
		case errors.Is(err, ErrNoChange):
			out = b
			return nil
		case errors.Is(err, ErrUndecodable):
			return c.Corrupt(k, rev, err)
		case err != nil:
			return err
		}
		if err := c.reserveSteps(ctx, k, fresh); err != nil {
			return err
		}
		if err := (*jspub.Writes)(nil).Do(ctx, func(ctx context.Context) error {
			_, err := c.kv.Update(ctx, k.Key(), nb, rev)
			return err
		}); err != nil {
			return fmt.Errorf("update composition %s: %w", k.ID, err)
		}
		out = nb
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Entry is one record's key, bytes and revision.
type Entry struct {
	Key      string
	Value    []byte
	Revision uint64
}

// isRecordKey reports whether key names a run's record, not a step id's
// reservation (step.<id>) or a kept document (<run key>.doc.<digest>).
func isRecordKey(key string) bool {
	return !strings.HasPrefix(key, "step.") && !strings.Contains(key, ".doc.")
}

// List returns up to limit composition records, every producer's and run.
func (c *Compositions) List(ctx context.Context, limit int) ([]Entry, error) {
	lister, err := c.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list compositions: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	var out []Entry
	for k := range lister.Keys() {
		if len(out) >= limit {
			break
		}
		if !isRecordKey(k) {
			continue
		}
		e, err := c.kv.Get(ctx, k)
		if err != nil {
			continue // expired since listed
		}
		out = append(out, Entry{Key: k, Value: e.Value(), Revision: e.Revision()})
	}
	return out, nil
}

// Producers lists the run-1 records of composition id, one per producer
// that has one (at most limit).
func (c *Compositions) Producers(ctx context.Context, id string, limit int) ([]Entry, error) {
	lister, err := c.kv.ListKeysFiltered(ctx, compositionPrefix(id)+".*")
	if err != nil {
		return nil, fmt.Errorf("composition %s: %w", id, err)
	}
	defer func() { _ = lister.Stop() }()
	var out []Entry
	for k := range lister.Keys() {
		if len(out) >= limit {
			break
		}
		e, err := c.kv.Get(ctx, k)
		if err != nil {
			continue // expired since listed
		}
		out = append(out, Entry{Key: k, Value: e.Value(), Revision: e.Revision()})
	}
	return out, nil
}

// CorruptEntry is the error of the entry e whose bytes do not decode.
func CorruptEntry(e Entry, why error) error {
	return corrupt.New(CompositionsBucket, e.Key, e.Revision, why)
}

// membership is what IsMember reads of a record (package compose owns
// the rest).
type membership struct {
	Steps       []string `json:"steps"`
	StepDigests []string `json:"step_digests"`
	Held        []int    `json:"held,omitempty"`
}

// decodeMembership reads the membership fields of a record's bytes,
// refusing steps and digests that do not align ([ErrUndecodable]).
func decodeMembership(b []byte) (membership, error) {
	var m membership
	if err := json.Unmarshal(b, &m); err != nil {
		return membership{}, fmt.Errorf("%w: %w", ErrUndecodable, err)
	}
	if len(m.StepDigests) != len(m.Steps) {
		return membership{}, fmt.Errorf("%w: %d steps, %d digests", ErrUndecodable, len(m.Steps), len(m.StepDigests))
	}
	return m, nil
}

// IsMember reports whether step of producer's composition id, run run, is
// the capsule id, whose integrity digest is digest, as sagad published it:
// the only composition membership RECEPTION lets a capsule declare. A
// step's id is known before sagad publishes it when the step is held after
// a verification loop (the compose reply names it) or is a loop's round
// recorded but not yet published; the digest, and a held step's refusal,
// keep its producer from running other bytes, or the step before the loop
// passed, under it.
func (c *Compositions) IsMember(ctx context.Context, producer, id string, run, step int, capsuleID, digest string) (bool, error) {
	k := RunKey{ID: id, Producer: producer, Run: run}
	b, rev, err := c.Get(ctx, k)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	m, err := decodeMembership(b)
	if err != nil {
		return false, c.Corrupt(k, rev, err)
	}
	return step >= 0 && step < len(m.Steps) && m.Steps[step] == capsuleID &&
		m.StepDigests[step] == digest && !slices.Contains(m.Held, step), nil
}
