package pipeline

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/health"
	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/phases"
	"github.com/sagad/sagad/rules"
	"github.com/sagad/sagad/store"
)

// DefaultWorkers is [Config.Workers]'s default.
const DefaultWorkers = 64

// Config configures a [Pipeline]. The zero value is usable.
type Config struct {
	// Logger receives one line per transition. Defaults to discarding.
	Logger *slog.Logger
	// InstanceID names this sagad in claims and logs. Defaults to host-pid-random.
	InstanceID string
	// Workspace is the root under which file: refs resolve. Defaults to ".".
	Workspace string
	// KVBuckets lists the KV buckets kv: refs may name; a ref to another
	// bucket never resolves. Defaults to none. sagad's own buckets
	// (SAGA_*) cannot be listed.
	KVBuckets []string
	// Replicas of every stream and bucket. Defaults to 1 (3 on a cluster).
	Replicas int
	// Storage of every stream and bucket. Defaults to file storage.
	Storage jetstream.StorageType
	// Migrate lets New change settings of existing streams and buckets that
	// differ from this configuration; without it New refuses with a
	// *store.DriftError and changes nothing (see store.Topology).
	Migrate bool
	// Workers is the number of capsules each phase works on at once in this
	// process, and so the most agent calls EXECUTION (or REVIEW) makes at
	// once. Defaults to 64: a worker mostly waits on JetStream round trips,
	// and more transitions in flight share each replicated append and disk
	// flush (sagabench: 64 ran 1.1–1.25 × 32 on one node and on R3; 128 no
	// better than 64).
	Workers int
	// AckWait is how long JetStream waits for an ack before redelivering.
	// Defaults to 30s; long executor runs send progress heartbeats.
	AckWait time.Duration
	// RetryDelay is how long a transient failure waits before the message is
	// redelivered. Defaults to 1s.
	RetryDelay time.Duration
	// PhaseTimeout bounds one phase run, executor included. Defaults to 10m.
	PhaseTimeout time.Duration
	// WriteTimeout bounds each JetStream write on its own (a publish, a KV
	// or object store write), whatever time the phase has left: a write
	// JetStream cannot take fails after it as a transient failure, and the
	// message is naked. Defaults to 5s.
	WriteTimeout time.Duration
	// Health is told how every JetStream write ended and when a phase
	// consumer finished a message (package health). Nil tells no one.
	Health *health.Monitor
	// Heartbeat is how often a long phase renews its message, locks and
	// execution claim. Defaults to 5s.
	Heartbeat time.Duration
	// ClaimLease is how long an execution claim outlives its last heartbeat;
	// after that another instance may take the cycle over. Defaults to 3 × Heartbeat.
	ClaimLease time.Duration
	// LockLease is the lease of resource locks. Defaults to 30s.
	LockLease time.Duration
	// DuplicateWindow is JetStream's de-duplication window for outcomes, the
	// only messages sagad de-duplicates by id. Defaults to 2m.
	DuplicateWindow time.Duration
	// MaxIntakeBytes is the hard size limit of intake messages. Defaults to 512 KiB.
	MaxIntakeBytes int
	// MaxDepth is how deep capsules published by executor calls
	// (parent_capsule_id) may nest: a child deeper halts
	// depth_exceeded:<depth> at RECEPTION. Defaults to [DefaultMaxDepth].
	MaxDepth int
	// ChildBudget is what a child capsule whose caps do not fit what its
	// parent's caps have left does at AUTOMATED_GATES (docs/DELEGATION.md):
	// [ChildBudgetHalt] halts it budget_exceeded:parent_tokens|parent_dollars
	// before any call, [ChildBudgetWait] parks it (trigger
	// parent_capacity) until a sibling's end frees room. Defaults to
	// ChildBudgetHalt: the parent learns at once that it asked for more
	// than it has, instead of a tree that waits on itself.
	ChildBudget string
	// IntakeQuota bounds each producer's waiting intake (store.IntakeQuota).
	// Zero fields default.
	IntakeQuota store.IntakeQuota
	// IntakeRate is how fast RECEPTION takes each producer's intake.
	// Zero fields default ([IntakeRate]).
	IntakeRate IntakeRate
	// Rules is the constitution's configuration. Defaults to rules defaults,
	// with ExecutorKinds and ReviewerIDs filled from Executors.
	Rules rules.Config
	// Executors serves task kinds and reviewer ids. Defaults to the built-in stubs.
	Executors *executors.Registry
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Metrics records what the pipeline does. Defaults to none (nil is safe).
	Metrics *metrics.Metrics
	// TracerProvider receives a span per capsule, per phase run and per
	// agent call (package internal/tracing; it is also set on Executors).
	// Nil records none, but workers still get each capsule's traceparent.
	TracerProvider trace.TracerProvider
	// LockWait is how long EXECUTION retries locks held by other capsules
	// before the capsule parks with lock_contention (PIPELINE §5). Negative
	// halts at once with lock_acquisition_failed. Defaults to 60s.
	LockWait time.Duration
	// BudgetWarning is the used fraction of a cap that pauses a capsule with
	// budget_warning, once. Negative disables it. Defaults to 0.75.
	BudgetWarning float64
	// InlineArtifactBytes is the largest artifact content an executor
	// request carries inline; a larger one is fetched by reference on
	// saga.artifacts.get. Defaults to 256 KiB.
	InlineArtifactBytes int64
	// DeadlineWarning pauses a capsule with deadline_approaching, once, when
	// less than this is left before its deadline. Negative disables it.
	// Defaults to 5m.
	DeadlineWarning time.Duration
	// Retention is how long an ended capsule is kept after its outcome was
	// published: its last checkpoint and its bytes carry that time to live
	// (JetStream per-message TTL), and events and artifacts are kept that
	// long after they were written. The outcome message stays in
	// SAGA_OUTCOMES, under that stream's own limits. 0 keeps everything
	// forever. JetStream keeps an index entry per key and subject in memory,
	// so without retention memory grows with every capsule ever run.
	Retention time.Duration

	// SweepInterval is how often parked capsules are looked at: lock_contention
	// ones resume when their locks are free, blocked_external ones have their
	// locks renewed or time out, waiting ones go on when their dependencies
	// completed or their wave has room (a wave change made by this process
	// wakes the sweeper at once). Defaults to 5s.
	SweepInterval time.Duration
	// DependencyTimeout is how long a capsule waits for a dependency sagad
	// does not know (never received, or forgotten after the retention)
	// before it halts with dependency_missing. Defaults to 24h.
	DependencyTimeout time.Duration
	// RescueAfter is how long a capsule in progress may go without a
	// checkpoint write, with its phase's queue empty, before the rescuer
	// sends its step again (maintenance.Rescuer). Negative disables the
	// rescuer. Defaults to 2m.
	RescueAfter time.Duration
	// NoDefer makes REALITY_ANCHOR, PLANNING and AUTOMATED_GATES write
	// their advance as every other phase does, instead of deferring it to
	// the next phase's write (deferred.go), and REVIEW write its own claim
	// instead of adopting the one EXECUTION's result write took
	// (adopt.go): the routine these replace, which the tests hold them to.
	NoDefer bool
	// NoPauseView makes sagad defer advances without regard to which
	// phases are paused (pauses.go), as a process does before it sees a
	// pause: for the tests that hold the deferral across a pause.
	NoPauseView bool
	// noMemo makes every deferred catch-up run its phases again rather
	// than take this process's own decisions from its memo (memo.go): the
	// routine the memo replaces, for the tests (export_test.go).
	noMemo bool
	// ExternalTimeout is how long a capsule waits for accepted external work
	// before it halts with executor_failed. Defaults to 1h.
	ExternalTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.InstanceID == "" {
		host, _ := os.Hostname()
		c.InstanceID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), nuid.Next()[:8])
	}
	if c.Workspace == "" {
		c.Workspace = "."
	}
	if abs, err := filepath.Abs(c.Workspace); err == nil {
		c.Workspace = abs
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.RetryDelay <= 0 {
		c.RetryDelay = time.Second
	}
	if c.PhaseTimeout <= 0 {
		c.PhaseTimeout = 10 * time.Minute
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = jspub.DefaultTimeout
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 5 * time.Second
	}
	if c.ClaimLease <= 0 {
		c.ClaimLease = 3 * c.Heartbeat
	}
	if c.LockLease <= 0 {
		c.LockLease = 30 * time.Second
	}
	if c.DuplicateWindow <= 0 {
		c.DuplicateWindow = 2 * time.Minute
	}
	if c.MaxDepth <= 0 {
		c.MaxDepth = DefaultMaxDepth
	}
	if c.ChildBudget == "" {
		c.ChildBudget = ChildBudgetHalt
	}
	if c.MaxIntakeBytes <= 0 {
		c.MaxIntakeBytes = phases.DefaultMaxIntakeBytes
	}
	if c.Executors == nil {
		c.Executors = executors.NewRegistry()
	}
	if len(c.Rules.ExecutorKinds) == 0 {
		c.Rules.ExecutorKinds = c.Executors.Kinds()
	}
	if len(c.Rules.ReviewerIDs) == 0 {
		c.Rules.ReviewerIDs = c.Executors.ReviewerIDs()
	}
	c.Rules = c.Rules.WithDefaults()
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.LockWait == 0 {
		c.LockWait = 60 * time.Second
	}
	if c.BudgetWarning == 0 {
		c.BudgetWarning = 0.75
	}
	if c.DeadlineWarning == 0 {
		c.DeadlineWarning = 5 * time.Minute
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = 5 * time.Second
	}
	if c.RescueAfter == 0 {
		c.RescueAfter = 2 * time.Minute
	}
	if c.ExternalTimeout <= 0 {
		c.ExternalTimeout = time.Hour
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if err := ValidateKVBuckets(c.KVBuckets); err != nil {
		errs = append(errs, err)
	}
	if c.Heartbeat >= c.AckWait {
		errs = append(errs, fmt.Errorf("heartbeat %s must be shorter than ack wait %s", c.Heartbeat, c.AckWait))
	}
	if c.ClaimLease <= c.Heartbeat {
		errs = append(errs, fmt.Errorf("claim lease %s must be longer than heartbeat %s", c.ClaimLease, c.Heartbeat))
	}
	if c.LockLease <= c.Heartbeat {
		errs = append(errs, fmt.Errorf("lock lease %s must be longer than heartbeat %s", c.LockLease, c.Heartbeat))
	}
	if c.SweepInterval >= c.LockLease {
		// The sweeper renews the locks of capsules waiting for external work.
		errs = append(errs, fmt.Errorf("sweep interval %s must be shorter than the lock lease %s", c.SweepInterval, c.LockLease))
	}
	if err := c.Rules.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.ChildBudget != ChildBudgetHalt && c.ChildBudget != ChildBudgetWait {
		errs = append(errs, fmt.Errorf("child budget %q: want %q or %q", c.ChildBudget, ChildBudgetHalt, ChildBudgetWait))
	}
	if c.Rules.MaxCapsuleBytes > c.MaxIntakeBytes {
		// RECEPTION refuses larger intake (capsule_too_large) before Rule 10
		// is ever asked: a higher limit would be a promise never kept.
		errs = append(errs, fmt.Errorf("%w: max_capsule_bytes: %d is above the intake limit of %d bytes",
			rules.ErrInvalidConfig, c.Rules.MaxCapsuleBytes, c.MaxIntakeBytes))
	}
	return errors.Join(errs...)
}

// [Config.ChildBudget]'s values.
const (
	ChildBudgetHalt = "halt"
	ChildBudgetWait = "wait"
)

// ValidateKVBuckets refuses a list of kv: ref buckets that names sagad's own
// state (a SAGA_ bucket: a capsule could then probe other capsules'
// checkpoints, locks and waves) or no valid bucket name.
func ValidateKVBuckets(buckets []string) error {
	var errs []error
	for _, b := range buckets {
		switch {
		case strings.HasPrefix(strings.ToUpper(b), "SAGA_"):
			errs = append(errs, fmt.Errorf("kv_buckets: %s is sagad's own bucket and cannot be named by kv: refs", b))
		case !validBucket(b):
			errs = append(errs, fmt.Errorf("kv_buckets: %q is no KV bucket name (letters, digits, - and _)", b))
		}
	}
	return errors.Join(errs...)
}

// validBucket reports whether s is a KV bucket name.
func validBucket(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}
