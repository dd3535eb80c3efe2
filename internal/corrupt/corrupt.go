// Package corrupt names the values in sagad's own buckets that sagad did
// not write: a checkpoint, lock, wave record, continuation or kept capsule
// that does not decode, or decodes to something sagad never writes under
// its key. Such a value is corruption, never a transient failure: reading
// it again gives the same bytes, so whoever meets one reports it once
// ([Reporter]) and ends what it was doing (the capsule halts
// state_corrupt:<bucket>, the message is terminated, the lock is taken
// over, the entry is skipped) instead of retrying.
//
// The decoders are strict (every member known, the key's own checkpoint or
// lease), which refuses JetStream's answers redirected onto a key and any
// bytes that are not what sagad writes; they do not authenticate. A MAC
// under a deployment secret was weighed and left out: the account that
// holds these buckets is sagad's alone (other roles reach sagad only
// through imports), so whoever can write a value there holds sagad's
// credentials, and with them any secret sagad could keep (a KV value of
// that account, or a file beside its seed in the data dir); and values
// written before an upgrade would need a marker of where MACs begin, on
// every checkpoint read of the hot path.
package corrupt

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
)

// The buckets whose values sagad trusts only when it wrote them; the
// closed label set of sagad_corrupt_values_total.
const (
	Checkpoints   = "SAGA_CHECKPOINTS"
	Capsules      = "SAGA_CAPSULES"
	Locks         = "SAGA_LOCKS"
	Budgets       = "SAGA_BUDGETS"
	Continuations = "SAGA_CONTINUATIONS"
	// ArtifactRecords and Artifacts hold artifact records (a KV entry, or
	// an object for a large one): one that does not decode, or names
	// another artifact, reads the same every time.
	ArtifactRecords = "SAGA_ARTIFACT_RECORDS"
	Artifacts       = "SAGA_ARTIFACTS"
)

// Buckets lists them.
var Buckets = []string{Checkpoints, Capsules, Locks, Budgets, Continuations, ArtifactRecords, Artifacts}

// ErrCorrupt is matched (errors.Is) by every [*Error].
var ErrCorrupt = errors.New("a value sagad did not write")

// Error is a value of Bucket under Key, at Revision, that sagad did not
// write; Err says why it is taken for one.
type Error struct {
	Bucket   string
	Key      string
	Revision uint64
	Err      error
}

// New returns an [*Error].
func New(bucket, key string, rev uint64, err error) error {
	return &Error{Bucket: bucket, Key: key, Revision: rev, Err: err}
}

// Error names the bucket, the key and the cause.
func (e *Error) Error() string {
	return fmt.Sprintf("%s %s at revision %d is no value sagad wrote: %v", e.Bucket, e.Key, e.Revision, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *Error) Is(target error) bool { return target == ErrCorrupt }

// As returns the [*Error] in err's chain.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// maxSeen bounds the values a [Reporter] remembers having reported; past
// it, it starts afresh (a value is then logged once more, never in a loop).
const maxSeen = 4096

// Reporter logs each corrupt value once at ERROR and counts it, however
// often it is met: every sagad loop that meets one (a redelivered message,
// a sweep, a rescue pass) reports it, and an operator needs one line and
// one count per value, not one per pass. It is safe for concurrent use; a
// nil Reporter reports nothing.
type Reporter struct {
	log   *slog.Logger
	count func(bucket string)

	mu   sync.Mutex
	seen map[seenKey]bool
}

type seenKey struct {
	bucket, key string
	rev         uint64
}

// NewReporter returns a Reporter logging to log and counting with count
// (nil: not counted).
func NewReporter(log *slog.Logger, count func(bucket string)) *Reporter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if count == nil {
		count = func(string) {}
	}
	return &Reporter{log: log, count: count, seen: make(map[seenKey]bool)}
}

// Report reports the [*Error] in err's chain, if any, and tells whether
// there was one. what says what sagad does about it ("the capsule halts").
func (r *Reporter) Report(err error, what string) bool {
	e, ok := As(err)
	if !ok {
		return false
	}
	if r == nil {
		return true
	}
	k := seenKey{e.Bucket, e.Key, e.Revision}
	r.mu.Lock()
	first := !r.seen[k]
	if first {
		if len(r.seen) >= maxSeen {
			clear(r.seen)
		}
		r.seen[k] = true
	}
	r.mu.Unlock()
	if !first {
		return true
	}
	bucket := e.Bucket
	if !slices.Contains(Buckets, bucket) {
		bucket = "other"
	}
	r.count(bucket)
	r.log.Error("a value sagad did not write: treated as corruption, not retried",
		"bucket", e.Bucket, "key", e.Key, "revision", e.Revision, "action", what, "error", e.Err)
	return true
}
