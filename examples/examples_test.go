package examples_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/locks"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/schemas"
	"github.com/sagad/sagad/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats.go v1.55.0 leaks this goroutine now and then from
		// ObjectStore.Put (artifacts): Put's private JetStream context
		// clears its status channel before the goroutine has read it, so
		// the goroutine blocks forever on a nil channel. Not ours to fix.
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
	)
}

// dir holds the example capsules, relative to this package.
const dir = "capsules"

// lockPath is the resource lock of the example capsules; the lock examples
// need another holder to take it.
const lockPath = "examples/capsules/README.md"

// otherHolder is the "other capsule" that holds lockPath in the lock examples.
const otherHolder = "someone-else"

// pipelineHaltCodes are the halt reasons of PIPELINE §3, in its order.
var pipelineHaltCodes = []capsule.HaltCode{
	"schema_invalid", "integrity_mismatch", "deadline_in_past", "budget_tokens_non_positive", "lock_unavailable",
	"context_ref_missing", "target_missing",
	"spec_not_approved",
	"absolute_rules_violated",
	"lock_acquisition_failed", "budget_exceeded", "executor_failed",
	"review_rejected_terminal", "max_cycles_exceeded",
}

// extraHaltCodes are RECEPTION's reasons beyond PIPELINE §3's table, from
// hardening the intake against untrusted producers (docs/CAPSULES.md's halt reasons).
var extraHaltCodes = []capsule.HaltCode{capsule.CodeBudgetDollarsNonPositive, capsule.CodeCapsuleLimitsExceeded, capsule.CodeChainMembershipRefused, capsule.CodeParentRefused, capsule.CodeModelNotAllowed}

// intakeHaltCodes are the intake reasons (bytes that never became a capsule)
// that have an example.
var intakeHaltCodes = []capsule.HaltCode{capsule.CodeNotJSON, capsule.CodeUnsupportedSchemaVersion}

// coordinatorHaltCodes are the reasons of the layer above one capsule
// (issue 14): each example needs a step besides its publish — an operator's
// decision, a dependency that halts first, a dependency's wait running out
// (sagad's --dependency-timeout), a wave closed while the capsule waits for
// its capacity.
var coordinatorHaltCodes = []capsule.HaltCode{capsule.CodeOperatorRejected, capsule.CodeDependencyFailed, capsule.CodeDependencyMissing, capsule.CodeWaveClosed, capsule.CodeWaveNotAdmitted, capsule.CodeDependencyCycle, capsule.CodeDeadlineExceeded}

// noExampleHaltCodes have no example file: capsule_too_large needs bytes
// over the intake's size limit, which a repository file should not carry
// (the intake tests send them); state_corrupt needs a write into sagad's
// buckets that sagad did not make (pipeline's corrupt tests make them);
// depth_exceeded needs a chain of parents each with an executor call in
// flight, which only a worker serving those calls can publish
// (pipeline's TestDepthExceeded does), and so does child_limit_exceeded,
// a child's, whose parent's call is in flight (pipeline's
// TestChildLimit tests).
var noExampleHaltCodes = []capsule.HaltCode{capsule.CodeCapsuleTooLarge, capsule.CodeStateCorrupt, capsule.CodeDepthExceeded, capsule.CodeChildLimitExceeded}

// Names the coordinator examples rely on.
const (
	// dependencyOfFailed is the capsule halt-dependency_failed.json
	// depends on: halt-executor_failed.json's.
	dependencyOfFailed = "halt-executor_failed.json"
	// closedWave is halt-wave_closed.json's wave_id.
	closedWave = "example-closed-wave"
	// producersWave is halt-wave_not_admitted.json's wave_id: a wave that
	// admits producer alice only; the example comes from mallory.
	producersWave = "example-closed-producers"
	// cyclePartner is the capsule halt-dependency_cycle.json waits for,
	// which waits for it in turn: both halt dependency_cycle.
	cyclePartner = "halt-dependency_cycle.partner.json"
	// dependencyTimeout is the --dependency-timeout TestExamples runs with.
	dependencyTimeout = time.Second
)

// cycleReason is how both capsules of the dependency_cycle example halt.
const cycleReason = "dependency_cycle:5a6a0000-0000-4000-8000-000000000024,5a6a0000-0000-4000-8000-000000000025"

// expected is the exact outcome of every example file: "" for completed,
// the halt reason otherwise. README.md's table says the same to people.
var expected = map[string]string{
	"valid.json":                            "",
	"halt-schema_invalid.json":              "schema_invalid:/budget/tokens",
	"halt-integrity_mismatch.json":          "integrity_mismatch",
	"halt-deadline_in_past.json":            "deadline_in_past",
	"halt-budget_tokens_non_positive.json":  "budget_tokens_non_positive",
	"halt-budget_dollars_non_positive.json": "budget_dollars_non_positive",
	"halt-capsule_limits_exceeded.json":     "capsule_limits_exceeded:constraints.network.allow_hosts",
	"halt-lock_unavailable.json":            "lock_unavailable:" + lockPath,
	"halt-context_ref_missing.json":         "context_ref_missing:file:examples/capsules/does-not-exist.md",
	"halt-target_missing.json":              "target_missing:file:examples/capsules/does-not-exist.md",
	"halt-spec_not_approved.json":           "spec_not_approved:[approved, approved_by, approved_at]",
	"halt-absolute_rules_violated.json":     "absolute_rules_violated:[4, 11, 25]",
	"halt-lock_acquisition_failed.json":     "lock_acquisition_failed:" + lockPath,
	"halt-budget_exceeded.json":             "budget_exceeded:tokens",
	"halt-executor_failed.json":             "executor_failed:model refused",
	"halt-dependency_cycle.json":            cycleReason,
	cyclePartner:                            cycleReason,
	"halt-review_rejected_terminal.json":    "review_rejected_terminal",
	"halt-max_cycles_exceeded.json":         "max_cycles_exceeded:3",
	"halt-not_json.txt":                     "not_json",
	"halt-unsupported_schema_version.json":  "unsupported_schema_version:2.0",
	"halt-operator_rejected.json":           "operator_rejected",
	"halt-dependency_failed.json":           "dependency_failed:5a6a0000-0000-4000-8000-000000000012",
	"halt-dependency_missing.json":          "dependency_missing:5a6a0000-0000-4000-8000-00000000dead",
	"halt-wave_closed.json":                 "wave_closed:" + closedWave,
	"halt-chain_membership_refused.json":    "chain_membership_refused:example-chain/0",
	"halt-wave_not_admitted.json":           "wave_not_admitted:" + producersWave,
	"halt-deadline_exceeded.json":           "deadline_exceeded:HANDOFF",
	"halt-parent_refused.json":              "parent_refused:5a6a0000-0000-4000-8000-00000000beef",
	"halt-model_not_allowed.json":           "model_not_allowed:ultra-tier",
}

// Intentionally broken examples: not capsules by the schema, and not sealed.
var (
	notSchemaValid = []string{"halt-schema_invalid.json", "halt-not_json.txt"}
	notSealed      = []string{"halt-integrity_mismatch.json", "halt-not_json.txt"}
)

// examples returns the example file names, sorted, and fails on any file
// that is neither the README nor valid.json nor halt-<known code>.<ext>.
func examples(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		name := e.Name()
		if name == "README.md" {
			continue
		}
		require.False(t, e.IsDir(), "unexpected directory %s", name)
		if name != "valid.json" {
			code, ok := haltCode(name)
			require.True(t, ok, "%s: example files are valid.json or halt-<reason>.<ext>", name)
			require.Contains(t, capsule.HaltCodes, code, "%s: no such halt code", name)
		}
		names = append(names, name)
	}
	return names
}

// haltCode is the <reason> of a halt-<reason>.<ext> file name.
func haltCode(name string) (capsule.HaltCode, bool) {
	rest, ok := strings.CutPrefix(name, "halt-")
	if !ok {
		return "", false
	}
	code, _, ok := strings.Cut(rest, ".")
	return capsule.HaltCode(code), ok && code != ""
}

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	require.NoError(t, err)
	return b
}

// TestEveryExampleIsExpected checks that the directory and the expected
// outcomes name the same files, and that the README documents each one.
func TestEveryExampleIsExpected(t *testing.T) {
	t.Parallel()
	names := examples(t)
	want := make([]string, 0, len(expected))
	for name := range expected {
		want = append(want, name)
	}
	slices.Sort(want)
	require.Equal(t, want, names, "every example file needs an expected outcome, and every expected outcome a file")

	readme := string(read(t, "README.md"))
	for _, name := range names {
		require.Contains(t, readme, "`"+name+"`", "README.md does not list %s", name)
		if reason := expected[name]; reason != "" {
			require.Contains(t, readme, "`"+reason+"`", "README.md does not give %s's reason", name)
		}
	}
}

// TestHaltReasonsCovered checks that the examples cover exactly the halt
// reasons of PIPELINE §3 plus the intake reasons that have an example.
func TestHaltReasonsCovered(t *testing.T) {
	t.Parallel()
	var covered []capsule.HaltCode
	for _, name := range examples(t) {
		if code, ok := haltCode(name); ok && !slices.Contains(covered, code) {
			covered = append(covered, code) // a reason of two capsules has two files
		}
	}
	want := append(append(append(slices.Clone(pipelineHaltCodes), extraHaltCodes...), intakeHaltCodes...), coordinatorHaltCodes...)
	require.ElementsMatch(t, want, covered)

	// PIPELINE §3 and the shared vocabulary agree: every code is one or the
	// other, and only those of noExampleHaltCodes have no example.
	require.ElementsMatch(t, append(want, noExampleHaltCodes...), capsule.HaltCodes,
		"a new halt code needs an example in examples/capsules (and a line in its README)")
}

// TestExamplesAreWellFormed checks the schema and the seal of every example
// that is not broken on purpose, and that the broken ones are broken.
func TestExamplesAreWellFormed(t *testing.T) {
	t.Parallel()
	ids := map[string]string{}
	for _, name := range examples(t) {
		raw := read(t, name)
		t.Run(name, func(t *testing.T) {
			if slices.Contains(notSchemaValid, name) {
				require.Error(t, schemas.Validate(schemas.Capsule, raw))
			} else {
				require.NoError(t, schemas.Validate(schemas.Capsule, raw))
			}
			switch {
			case name == "halt-integrity_mismatch.json":
				require.ErrorIs(t, capsule.VerifyIntegrity(raw), capsule.ErrIntegrityMismatch)
			case slices.Contains(notSealed, name):
				require.Error(t, capsule.VerifyIntegrity(raw))
			default:
				require.NoError(t, capsule.VerifyIntegrity(raw))
			}
			if !json.Valid(raw) {
				return
			}
			var head struct {
				CapsuleID string `json:"capsule_id"`
			}
			require.NoError(t, json.Unmarshal(raw, &head))
			require.NotEmpty(t, head.CapsuleID)
			if other, dup := ids[head.CapsuleID]; dup {
				t.Fatalf("capsule_id %s is used by %s too", head.CapsuleID, other)
			}
			ids[head.CapsuleID] = name
		})
	}
}

// fixture is one embedded server, one running pipeline with the repository
// root as its workspace, a client and a lock manager on the pipeline's bucket.
type fixture struct {
	js     jetstream.JetStream
	client *client.Client
	locks  *locks.Manager
	pipe   *pipeline.Pipeline
}

type tlogWriter struct{ t testing.TB }

func (w tlogWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

func setup(t *testing.T, opts ...func(*pipeline.Config)) *fixture {
	t.Helper()
	ctx := context.Background()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	cfg := pipeline.Config{
		Logger:     slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Workspace:  root,
		Workers:    4,
		AckWait:    2 * time.Second,
		Heartbeat:  300 * time.Millisecond,
		RetryDelay: 50 * time.Millisecond,
		// A lock held by another capsule halts EXECUTION at once, rather
		// than after a minute of retries and a lock_contention pause.
		LockWait: -1,
	}
	for _, o := range opts {
		o(&cfg)
	}
	p, err := pipeline.New(ctx, js, cfg)
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	client, err := client.NewClient(ctx, js)
	require.NoError(t, err)
	lm, err := locks.New(ctx, js, locks.Config{})
	require.NoError(t, err)
	return &fixture{js: js, client: client, locks: lm, pipe: p}
}

// holdLock takes lockPath as another capsule would, until release is called
// or the test ends. It takes it through the pipeline's own lock manager, as a
// capsule in EXECUTION does, so RECEPTION's lock check (answered from a watch
// of the locks bucket) sees it at once rather than when the watch catches up.
func (f *fixture) holdLock(t *testing.T) (release func()) {
	t.Helper()
	require.NoError(t, f.pipe.Store().Locks.TryAcquire(context.Background(), lockPath, otherHolder))
	released := false
	release = func() {
		if released {
			return
		}
		released = true
		require.NoError(t, f.pipe.Store().Locks.Release(context.Background(), lockPath, otherHolder))
	}
	t.Cleanup(release)
	return release
}

// publish sends raw to the intake and returns the two keys its checkpoint
// may have: the capsule id it claims (if readable) and "x-<intake seq>".
func (f *fixture) publish(t *testing.T, raw []byte) []string {
	t.Helper()
	seq, err := f.client.Publish(context.Background(), raw, "")
	require.NoError(t, err)
	keys := []string{"x-" + strconv.FormatUint(seq, 10)}
	var head struct {
		CapsuleID string `json:"capsule_id"`
	}
	if json.Unmarshal(raw, &head) == nil && head.CapsuleID != "" {
		keys = append(keys, head.CapsuleID)
	}
	return keys
}

// find returns the status of the capsule checkpointed under one of keys.
func (f *fixture) find(t *testing.T, keys []string) (client.Status, bool) {
	t.Helper()
	all, err := f.client.List(context.Background(), "")
	require.NoError(t, err)
	for _, s := range all {
		if slices.Contains(keys, s.Key) {
			return s, true
		}
	}
	return client.Status{}, false
}

// wait polls until the capsule under keys is terminal.
func (f *fixture) wait(t *testing.T, keys []string) client.Status {
	t.Helper()
	var s client.Status
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		var ok bool
		s, ok = f.find(t, keys)
		return ok && s.State.Terminal()
	}, "capsule %v never reached a terminal state", keys)
	return s
}

// waitLockFree polls until nobody holds lockPath: a capsule halted in
// EXECUTION releases its locks just after its checkpoint records the halt,
// and the next example must find them free.
func (f *fixture) waitLockFree(t *testing.T) {
	t.Helper()
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		free, err := f.locks.Available(context.Background(), lockPath, "probe")
		require.NoError(t, err)
		return free
	}, "lock %s still held", lockPath)
}

// pauseExecution stops EXECUTION's consumer from delivering, so a capsule
// waits between AUTOMATED_GATES and EXECUTION, and returns resume.
//
// resume moves the pause deadline 50ms ahead instead of clearing the pause:
// nats-server (2.15) wakes a paused consumer's waiting pull requests when the
// deadline passes, but not when the pause is cleared, so a cleared pause would
// only deliver on the pipeline's next pull, seconds later.
func (f *fixture) pauseExecution(t *testing.T) (resume func()) {
	t.Helper()
	ctx := context.Background()
	stream, name := store.PhaseStream(capsule.Execution), store.ConsumerName(capsule.Execution)
	res, err := f.js.PauseConsumer(ctx, stream, name, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.True(t, res.Paused)
	t.Cleanup(func() {
		_, err := f.js.ResumeConsumer(context.Background(), stream, name)
		require.NoError(t, err)
	})
	return func() {
		_, err := f.js.PauseConsumer(ctx, stream, name, time.Now().Add(50*time.Millisecond))
		require.NoError(t, err)
	}
}

// waitAtExecution polls until the capsule passed AUTOMATED_GATES (its
// checkpoint's phase is EXECUTION) and its message waits, undelivered, on the
// paused EXECUTION consumer.
func (f *fixture) waitAtExecution(t *testing.T, keys []string) {
	t.Helper()
	ctx := context.Background()
	cons, err := f.js.Consumer(ctx, store.PhaseStream(capsule.Execution), store.ConsumerName(capsule.Execution))
	require.NoError(t, err)
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		s, ok := f.find(t, keys)
		if !ok {
			return false
		}
		require.Equal(t, capsule.InProgress, s.State, "halt: %s", s.HaltReason)
		// Its step waits in EXECUTION's queue; its checkpoint may still
		// show PLANNING (EXECUTION's claim writes the deferred advances).
		info, err := cons.Info(ctx)
		require.NoError(t, err)
		return info.NumPending == 1
	}, "capsule %v never reached EXECUTION's queue", keys)
}

// TestExamples publishes every example, one at a time because they share a
// lock, and checks its exact outcome.
func TestExamples(t *testing.T) {
	t.Parallel()
	f := setup(t, func(c *pipeline.Config) {
		// dependency_missing's wait runs out in a second, not a day.
		c.DependencyTimeout = dependencyTimeout
		c.SweepInterval = 100 * time.Millisecond
	})
	for _, name := range examples(t) {
		want, ok := expected[name]
		require.True(t, ok, "no expected outcome for %s", name)
		t.Run(name, func(t *testing.T) {
			raw := read(t, name)
			release := func() {}
			var keys []string
			f := f
			switch code, _ := haltCode(name); code {
			case capsule.CodeLockUnavailable:
				// RECEPTION finds the lock held by another capsule.
				release = f.holdLock(t)
				keys = f.publish(t, raw)
			case capsule.CodeLockAcquisitionFailed:
				// RECEPTION finds the lock free; another capsule takes it
				// while this one waits for EXECUTION.
				resume := f.pauseExecution(t)
				keys = f.publish(t, raw)
				f.waitAtExecution(t, keys)
				release = f.holdLock(t)
				resume()
			case capsule.CodeOperatorRejected:
				// Approved by the reviewer, it waits at the operator gate;
				// the operator rejects it (sagactl decide ID reject).
				keys = f.publish(t, raw)
				f.waitState(t, keys, capsule.WaitingForOperator)
				_, err := f.pipe.Admin().Decide(context.Background(), keys[len(keys)-1], admin.DecisionReject, "not this one", "example-operator")
				require.NoError(t, err)
			case capsule.CodeDeadlineExceeded:
				// Approved by the reviewer, it waits at the operator gate,
				// and nobody decides before its deadline: sagad's clock,
				// its own here, is moved past it, and the sweeper halts
				// the capsule where it waits.
				clk := &shiftClock{}
				f = setup(t, func(c *pipeline.Config) {
					c.Now = clk.now
					c.SweepInterval = 100 * time.Millisecond
				})
				keys = f.publish(t, raw)
				f.waitState(t, keys, capsule.WaitingForOperator)
				clk.moveTo(time.Date(2030, 1, 7, 0, 0, 1, 0, time.UTC))
			case capsule.CodeDependencyFailed:
				// Its dependency halts (executor_failed), before or after
				// it is published: published first here, it waits.
				keys = f.publish(t, raw)
				f.waitState(t, keys, capsule.Waiting)
				dep := f.publish(t, read(t, dependencyOfFailed))
				require.Equal(t, capsule.Halted, f.wait(t, dep).State)
			case capsule.CodeDependencyCycle:
				// Published first, it waits for its partner; the partner
				// waits for it in turn, and the sweeper halts both. The
				// partner's own subtest (after this one) finds it halted.
				if name == cyclePartner {
					keys = []string{"5a6a0000-0000-4000-8000-000000000025"}
					break
				}
				keys = f.publish(t, raw)
				f.waitState(t, keys, capsule.Waiting)
				f.publish(t, read(t, cyclePartner))
			case capsule.CodeWaveClosed:
				// sagactl wave set example-closed-wave --tokens 1000: the
				// capsule's 10,000 tokens do not fit, it waits; then
				// sagactl wave close example-closed-wave. (A wave closed
				// before admission is Rule 19: absolute_rules_violated:[19].)
				_, err := f.pipe.Store().Budgets.ChangeWave(context.Background(), closedWave, budget.WaveChange{Tokens: ptr(int64(1000))})
				require.NoError(t, err)
				keys = f.publish(t, raw)
				f.waitState(t, keys, capsule.Waiting)
				_, err = f.pipe.Store().Budgets.ChangeWave(context.Background(), closedWave, budget.WaveChange{Close: true})
				require.NoError(t, err)
			case capsule.CodeWaveNotAdmitted:
				// sagactl wave set example-closed-producers --producers
				// alice; the capsule comes from producer mallory (on
				// saga.intake.mallory, where her account's import puts it).
				_, err := f.pipe.Store().Budgets.ChangeWave(context.Background(), producersWave, budget.WaveChange{Producers: &[]string{"alice"}})
				require.NoError(t, err)
				ack, err := f.js.Publish(context.Background(), store.IntakeProducerPrefix+"mallory", raw)
				require.NoError(t, err)
				keys = []string{"x-" + strconv.FormatUint(ack.Sequence, 10), "5a6a0000-0000-4000-8000-000000000023"}
			default:
				keys = f.publish(t, raw)
			}
			s := f.wait(t, keys)
			release()
			f.waitLockFree(t)

			if want == "" {
				require.Equal(t, capsule.Completed, s.State, "halt: %s", s.HaltReason)
				require.Empty(t, s.HaltReason)
				return
			}
			require.Equal(t, capsule.Halted, s.State)
			code, _ := haltCode(name)
			require.Equal(t, code, capsule.ParseHaltReason(s.HaltReason).Code, "reason %q", s.HaltReason)
			require.Equal(t, want, s.HaltReason)
		})
	}
}

// waitState polls until the capsule under keys is in state st.
func (f *fixture) waitState(t *testing.T, keys []string, st capsule.State) {
	t.Helper()
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		s, ok := f.find(t, keys)
		if ok && s.State.Terminal() {
			t.Fatalf("capsule %v ended (%s %s) before it was %s", keys, s.State, s.HaltReason, st)
		}
		return ok && s.State == st
	}, "capsule %v never was %s", keys, st)
}

func ptr[T any](v T) *T { return &v }

// shiftClock is the real clock, until it is moved to a later time from
// which it goes on.
type shiftClock struct{ offset atomic.Int64 }

func (c *shiftClock) now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

func (c *shiftClock) moveTo(at time.Time) { c.offset.Store(int64(time.Until(at))) }

// TestDependencyExample runs examples/dependencies as its README does: the
// dependent capsule, published first, waits in state waiting for the other,
// and both complete once that one is published.
func TestDependencyExample(t *testing.T) {
	f := setup(t)
	read := func(name string) []byte {
		raw, err := os.ReadFile(filepath.Join("dependencies", name))
		require.NoError(t, err)
		return raw
	}
	second := f.publish(t, read("second.json"))
	const first = "d1a00000-0000-4000-8000-000000000001"
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		s, ok := f.find(t, second)
		return ok && s.State == capsule.Waiting && s.WaitingOn == "dependencies" && slices.Equal(s.Pending, []string{first})
	}, "the dependent capsule never waited for %s", first)

	firstKeys := f.publish(t, read("first.json"))
	require.Equal(t, capsule.Completed, f.wait(t, firstKeys).State)
	s := f.wait(t, second)
	require.Equal(t, capsule.Completed, s.State, "halt reason %q", s.HaltReason)
}
