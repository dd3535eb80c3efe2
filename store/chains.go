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
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/internal/cas"
	"github.com/sagad/sagad/internal/corrupt"
	"github.com/sagad/sagad/internal/jspub"
)

// ChainsBucket holds one record per composition sagad assigned (package
// compose): keyed by chain and producer, so a chain id is its producer's own
// namespace and a capsule's chain membership is checked against it at
// RECEPTION.
const ChainsBucket = "SAGA_CHAINS"

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

// ErrChainExists is returned by [Chains.Create] when the producer already
// has a chain of that id.
var ErrChainExists = errors.New("chain exists")

// MaxProducerLen bounds a producer name.
const MaxProducerLen = 64

var producerName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidProducer reports whether p can name a producer (1 to 64 of
// [A-Za-z0-9_-]); "" is sagad's own intake.
func ValidProducer(p string) bool { return p == "" || producerName.MatchString(p) }

// ChainRecord is what sagad assigned to one chain of one producer: the
// document it was made of (by digest) and the capsule id of every step.
type ChainRecord struct {
	ChainID  string `json:"chain_id"`
	Producer string `json:"producer"`
	// Digest is the SHA-256 (lowercase hex) of the chain document's bytes:
	// the same document again gets the same steps.
	Digest string `json:"digest"`
	// Steps are the steps' capsule ids, in order: random, so nobody can
	// claim one before sagad publishes it.
	Steps []string `json:"steps"`
	// StepDigests are the integrity digests of the steps' sealed capsules
	// sagad published, in order.
	StepDigests []string  `json:"step_digests"`
	CreatedAt   time.Time `json:"created_at"`
	// Run is the composition's run, from 1 (0 in a record written before
	// runs were counted is run 1): an edited document under the same id
	// is a new run, with new steps.
	Run int `json:"run,omitempty"`
	// Names are the steps' names, in order (empty for a chain document,
	// whose step i is step-<i>).
	Names []string `json:"names,omitempty"`
	// Needs are each step's needs as indexes into Steps, aligned with
	// Names (empty for a chain document, whose step i needs step i-1, and
	// in a record written before needs were kept): indexes, not names, so
	// a 256-step record stays small.
	Needs [][]int `json:"needs,omitempty"`
	// State is the run's: "" (running) or paused until every step ended,
	// then completed, failed or partial (see [CompositionState]); or
	// cancelled.
	State string `json:"state,omitempty"`
	// Ended is each step's end, aligned with Steps (empty while none ended;
	// an entry's State is "" until its step ends).
	Ended []StepEnd `json:"ended,omitempty"`
	// OutcomeSent: the run's one outcome message was acknowledged.
	OutcomeSent bool `json:"outcome_sent,omitempty"`
	// EndedAt is when the last step's end was recorded.
	EndedAt *time.Time `json:"ended_at,omitempty"`
	// Replays counts the replays of the run (composition replay), from 0.
	Replays int `json:"round,omitempty"`
	// By is who last paused, resumed, cancelled or replayed the run, and
	// Reason why.
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Loops are the run's verification loops, in the document's order
	// (see [LoopRun]).
	Loops []LoopRun `json:"loops,omitempty"`
	// Held are the steps after a loop that wait, unpublished, until every
	// loop before them passed: they are built then, on the last round's
	// capsules.
	Held []int `json:"held,omitempty"`
	// Unpublished are the steps recorded (ids, digests) but not yet known
	// published: a loop's new round, the steps a loop released. Whoever
	// reads the record publishes them (idempotently) and clears them.
	Unpublished []int `json:"unpublished,omitempty"`
	// PublishError is why the compose request could not publish the
	// steps in Unpublished (the producer's intake full, "maximum messages
	// per subject exceeded"): sagad publishes them itself as room appears
	// (compose.Service) and clears it. Empty otherwise.
	PublishError string `json:"publish_error,omitempty"`
}

// AllEnded reports whether every step of r ended.
func (r *ChainRecord) AllEnded() bool {
	if len(r.Ended) != len(r.Steps) {
		return false
	}
	for _, e := range r.Ended {
		if e.State == "" {
			return false
		}
	}
	return true
}

// StepEnd is how one step of a composition ended.
type StepEnd struct {
	// State is the capsule's end: completed, halted or cancelled.
	State string `json:"state,omitempty"`
	// Artifact is the step's final artifact ref (the last of its
	// artifact_refs), for a completed step.
	Artifact   string  `json:"artifact,omitempty"`
	HaltReason string  `json:"halt_reason,omitempty"`
	Tokens     int64   `json:"tokens,omitempty"`
	Dollars    float64 `json:"dollars,omitempty"`
	// After, for a step replayed, is the capsule run whose end is past:
	// only a later run's end is the step's.
	After int `json:"after,omitempty"`
}

// Composition states (a run's).
const (
	CompositionRunning   = "running"
	CompositionCompleted = "completed"
	CompositionFailed    = "failed"
	CompositionPartial   = "partial"
	CompositionCancelled = "cancelled"
	CompositionPaused    = "paused"
)

// CompositionState is the state of a run whose steps all ended, from how
// many completed: all (completed), none (failed) or some (partial).
func CompositionState(passed, total int) string {
	switch {
	case passed == total:
		return CompositionCompleted
	case passed == 0:
		return CompositionFailed
	}
	return CompositionPartial
}

// StateOf is r's state: running until its steps all ended.
func (r *ChainRecord) StateOf() string {
	if r.State == "" {
		return CompositionRunning
	}
	return r.State
}

// RunOf is r's run, from 1.
func (r *ChainRecord) RunOf() int { return max(r.Run, 1) }

// Chains reads and creates chain records.
type Chains struct {
	kv jetstream.KeyValue
	// js reads a record from the stream's leader (see get); nil reads
	// through kv.
	js jetstream.JetStream
}

// get is key's record bytes and revision, as the stream's leader has them:
// RECEPTION's membership check runs right after the compose service made
// the record, and the runner's compare-and-set decides on what it reads, so
// neither may be answered by a replica that is behind.
func (c *Chains) get(ctx context.Context, key string) ([]byte, uint64, error) {
	if c.js != nil {
		return lastFromLeader(ctx, c.js, nil, ChainsBucket, key)
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

func ensureChains(ctx context.Context, js jetstream.JetStream, cfg Topology) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: ChainsBucket, Description: "sagad: composition records (chain steps sagad assigned), per chain and producer",
		Storage: cfg.Storage, Replicas: cfg.Replicas,
		TTL: cfg.Retention, // a chain's steps end within the retention of its creation, or are halted
	})
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", ChainsBucket, err)
	}
	return kv, nil
}

// chainKey is the record's key: the chain id's digest (chain ids are free
// text) then the producer, so every producer's chain of one id is found by
// one prefix.
func chainKey(chainID, producer string) string {
	return chainPrefix(chainID) + "." + producerToken(producer)
}

// runKey is run's record: run 1 is under [chainKey], as before runs were
// counted; run n > 1 under chainKey.<n>, which the producers' listing
// (one token after the prefix) does not see.
func runKey(chainID, producer string, run int) string {
	if run <= 1 {
		return chainKey(chainID, producer)
	}
	return chainKey(chainID, producer) + "." + strconv.Itoa(run)
}

func chainPrefix(chainID string) string {
	h := sha256.Sum256([]byte(chainID))
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

// Create stores r unless its producer already has a chain of that id
// ([ErrChainExists]): one compare-and-set, so two sagads composing the
// same chain at once assign it once. Its step ids are reserved first
// ([Chains.IsStepID]).
func (c *Chains) Create(ctx context.Context, r ChainRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := c.reserveSteps(ctx, &r, r.Steps); err != nil {
		return err
	}
	if err := (*jspub.Writes)(nil).Do(ctx, func(ctx context.Context) error {
		_, err := c.kv.Create(ctx, runKey(r.ChainID, r.Producer, r.Run), b)
		return err
	}); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("%w: %s of producer %q", ErrChainExists, r.ChainID, r.Producer)
		}
		return fmt.Errorf("create chain %s: %w", r.ChainID, err)
	}
	return nil
}

// Get returns producer's chain chainID; it wraps [ErrNotFound] when there
// is none.
func (c *Chains) Get(ctx context.Context, chainID, producer string) (*ChainRecord, error) {
	return c.GetRun(ctx, chainID, producer, 1)
}

// GetRun returns run run of producer's composition chainID; it wraps
// [ErrNotFound] when there is none, and is a *corrupt.Error when its
// value does not decode.
func (c *Chains) GetRun(ctx context.Context, chainID, producer string, run int) (*ChainRecord, error) {
	r, _, err := c.read(ctx, chainID, producer, run)
	return r, err
}

// ErrNoChange is returned by an [Chains.Update] mutation that changes
// nothing: the record is not written.
var ErrNoChange = errors.New("no change")

// Update applies change to run run of producer's composition chainID with
// one compare-and-set under sagad's one retry policy (cas.Retry: read
// again from the stream's leader and change again on a concurrent write),
// and returns the record as stored. change returning [ErrNoChange] writes
// nothing and returns the record as read. Step ids change brings (a
// loop's new round) are reserved before the record names them
// ([Chains.IsStepID]). A record that does not decode is corruption
// (corrupt.ErrCorrupt): reading it again gives the same bytes, so it is
// not retried.
func (c *Chains) Update(ctx context.Context, chainID, producer string, run int, change func(*ChainRecord) error) (*ChainRecord, error) {
	key := runKey(chainID, producer, run)
	var out *ChainRecord
	err := cas.Retry(ctx, func(ctx context.Context) error {
		r, rev, err := c.read(ctx, chainID, producer, run)
		if err != nil {
			return err
		}
		before := slices.Clone(r.Steps)
		if err := change(r); errors.Is(err, ErrNoChange) {
			out = r
			return nil
		} else if err != nil {
			return err
		}
		nb, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if err := c.reserveSteps(ctx, r, newStepIDs(before, r.Steps)); err != nil {
			return err
		}
		if err := (*jspub.Writes)(nil).Do(ctx, func(ctx context.Context) error {
			_, err := c.kv.Update(ctx, key, nb, rev)
			return err
		}); err != nil {
			return fmt.Errorf("update chain %s: %w", chainID, err)
		}
		out = r
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// read is run run of producer's composition chainID and its revision; a
// value that does not decode is a *corrupt.Error of [ChainsBucket].
func (c *Chains) read(ctx context.Context, chainID, producer string, run int) (*ChainRecord, uint64, error) {
	key := runKey(chainID, producer, run)
	b, rev, err := c.get(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return nil, 0, fmt.Errorf("%w: chain %s run %d of producer %q", ErrNotFound, chainID, max(run, 1), producer)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("chain %s: %w", chainID, err)
	}
	r, err := DecodeChainRecord(b)
	if err != nil {
		return nil, 0, corrupt.New(ChainsBucket, key, rev, err)
	}
	return r, rev, nil
}

// List returns up to limit composition runs, every producer's and run.
func (c *Chains) List(ctx context.Context, limit int) ([]*ChainRecord, error) {
	lister, err := c.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list chains: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	var out []*ChainRecord
	for k := range lister.Keys() {
		if len(out) >= limit {
			break
		}
		e, err := c.kv.Get(ctx, k)
		if err != nil {
			continue // expired since listed
		}
		r, err := DecodeChainRecord(e.Value())
		if err != nil {
			continue // reported where it is read by name
		}
		out = append(out, r)
	}
	return out, nil
}

// Producers lists the chains of id chainID, one per producer that has one
// (at most limit).
func (c *Chains) Producers(ctx context.Context, chainID string, limit int) ([]*ChainRecord, error) {
	lister, err := c.kv.ListKeysFiltered(ctx, chainPrefix(chainID)+".*")
	if err != nil {
		return nil, fmt.Errorf("chain %s: %w", chainID, err)
	}
	defer func() { _ = lister.Stop() }()
	var out []*ChainRecord
	for k := range lister.Keys() {
		if len(out) >= limit {
			break
		}
		e, err := c.kv.Get(ctx, k)
		if err != nil {
			continue // expired since listed
		}
		r, err := DecodeChainRecord(e.Value())
		if err != nil {
			return nil, corrupt.New(ChainsBucket, k, e.Revision(), err)
		}
		out = append(out, r)
	}
	return out, nil
}

// IsMember reports whether step of producer's chain chainID is the capsule
// id, whose integrity digest is digest, as sagad published it: the only
// chain membership RECEPTION lets a capsule declare. A step's id is known
// before sagad publishes it when the step is held after a verification
// loop (the compose reply names it) or is a loop's round recorded but not
// yet published; the digest, and a held step's refusal, keep its producer
// from running other bytes, or the step before the loop passed, under it.
func (c *Chains) IsMember(ctx context.Context, producer, chainID string, run, step int, capsuleID, digest string) (bool, error) {
	r, err := c.GetRun(ctx, chainID, producer, run)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return step >= 0 && step < len(r.Steps) && r.Steps[step] == capsuleID &&
		r.StepDigests[step] == digest && !slices.Contains(r.Held, step), nil
}

// maxChainRecordSteps matches composition.schema.json's maxItems.
const maxChainRecordSteps = 256

// CompositionStateOf is the state of the composition record b, for the
// metrics collector (which cannot import this package): ok is false for
// bytes that are not a record.
func CompositionStateOf(b []byte) (state string, ok bool) {
	r, err := DecodeChainRecord(b)
	if err != nil {
		return "", false
	}
	return r.StateOf(), true
}

// DecodeChainRecord decodes a chain record, refusing one that does not
// hold together (sagad wrote every record, so this is corruption).
func DecodeChainRecord(b []byte) (*ChainRecord, error) {
	var r ChainRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("chain record: %w", err)
	}
	if r.ChainID == "" || len(r.Steps) == 0 || len(r.Steps) > maxChainRecordSteps || len(r.StepDigests) != len(r.Steps) || !ValidProducer(r.Producer) ||
		r.Run < 0 || (len(r.Names) != 0 && len(r.Names) != len(r.Steps)) || (len(r.Ended) != 0 && len(r.Ended) != len(r.Steps)) ||
		(len(r.Needs) != 0 && len(r.Needs) != len(r.Steps)) {
		return nil, errors.New("chain record: malformed")
	}
	for _, needs := range r.Needs {
		for _, j := range needs {
			if j < 0 || j >= len(r.Steps) {
				return nil, errors.New("chain record: malformed needs")
			}
		}
	}
	if err := validLoops(&r); err != nil {
		return nil, err
	}
	return &r, nil
}
