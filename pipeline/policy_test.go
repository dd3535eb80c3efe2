package pipeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/schemas"
	"github.com/sagad/sagad/store"
)

// flakyCommand is a command executor that fails its first `fails` calls
// with exit status code (a reply with 5 tokens of usage on stdout and
// "diag <n>" on stderr), then answers ok with 7 tokens. Every request and
// idempotency key is kept in dir.
func flakyCommand(dir string, code, fails int) executors.Command {
	script := fmt.Sprintf(`d=%q
n=$(( $(cat "$d/n" 2>/dev/null || echo 0) + 1 )); echo $n > "$d/n"
cat > "$d/req.$n"
echo "$SAGA_IDEMPOTENCY_KEY" >> "$d/keys"
if [ $n -le %d ]; then echo '{"status":"failed","error":"try again","usage":{"tokens":5,"dollars":0}}'; echo "diag $n" >&2; exit %d; fi
echo '{"status":"ok","content":{"ok":true},"usage":{"tokens":7,"dollars":0}}'
`, dir, fails, code)
	return executors.Command{Path: "/bin/sh", Args: []string{"-c", script}, Name: "flaky"}
}

func calls(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "keys"))
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	return strings.Fields(string(b))
}

func request(t *testing.T, dir string, n int) executors.ExecuteCall {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("req.%d", n)))
	require.NoError(t, err)
	var call executors.ExecuteCall
	require.NoError(t, json.Unmarshal(b, &call))
	return call
}

// policyDoc is a capsule of task kind "flaky" whose review costs nothing, so
// its budget_used is the executor's usage alone.
func policyDoc(t *testing.T, f *fixture) capsuletest.Doc {
	return f.own(t, capsuletest.New().Set("task.kind", "flaky").Set("metadata.stub.review_usage", map[string]any{"tokens": 0, "dollars": 0}))
}

func setupFlaky(t *testing.T, code, fails int) (*fixture, string) {
	dir := t.TempDir()
	f := setupWith(t, func(c *pipeline.Config) { c.Executors.RegisterExecutor("flaky", flakyCommand(dir, code, fails)) })
	return f, dir
}

// TestFailurePolicyRetries: exit 1, 12 and 21 are retried once with a key of
// their own and the previous failure's diagnostics; both attempts are
// charged.
func TestFailurePolicyRetries(t *testing.T) {
	t.Parallel()
	for _, code := range []int{executors.ExitFailure, executors.ExitPartialSuccess, executors.ExitTimeout} {
		t.Run(fmt.Sprint("exit ", code), func(t *testing.T) {
			t.Parallel()
			f, dir := setupFlaky(t, code, 1)
			doc := policyDoc(t, f)
			f.publish(t, doc.Sealed(t))
			s := f.wait(t, doc.ID())
			require.Equal(t, capsule.Completed, s.State, s.HaltReason)
			require.Equal(t, []string{doc.ID() + "/1", doc.ID() + "/1/a2"}, calls(t, dir))
			require.Nil(t, request(t, dir, 1).PreviousFailure)
			pf := request(t, dir, 2).PreviousFailure
			require.NotNil(t, pf)
			require.Equal(t, 1, pf.Attempt)
			require.Equal(t, code, pf.ExitCode)
			require.Contains(t, pf.Error, "try again")
			require.Contains(t, pf.StderrTail, "diag 1")
			cp, err := f.client.Checkpoint(context.Background(), doc.ID())
			require.NoError(t, err)
			require.Equal(t, int64(12), cp.State.BudgetUsed.Tokens, "both attempts charged")
		})
	}
}

// TestFailurePolicyExhausted: exit 1 twice halts executor_failed after the
// one retry; exit 2 halts at once.
func TestFailurePolicyExhausted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ code, calls int }{{executors.ExitFailure, 2}, {executors.ExitDepthExceeded, 1}} {
		t.Run(fmt.Sprint("exit ", tc.code), func(t *testing.T) {
			t.Parallel()
			f, dir := setupFlaky(t, tc.code, 5)
			doc := policyDoc(t, f)
			f.publish(t, doc.Sealed(t))
			s := f.wait(t, doc.ID())
			require.Equal(t, capsule.Halted, s.State)
			require.True(t, strings.HasPrefix(s.HaltReason, "executor_failed:"), s.HaltReason)
			require.Len(t, calls(t, dir), tc.calls)
			cp, err := f.client.Checkpoint(context.Background(), doc.ID())
			require.NoError(t, err)
			require.Equal(t, int64(5*tc.calls), cp.State.BudgetUsed.Tokens)
		})
	}
}

// TestFailurePolicyPausesForAPerson: exit 11 pauses blocked_external with the
// failure; resume calls again (attempt 2, with previous_failure) and
// completes.
func TestFailurePolicyPausesForAPerson(t *testing.T) {
	t.Parallel()
	f, dir := setupFlaky(t, executors.ExitNeedsEscalation, 1)
	ctx := context.Background()
	doc := policyDoc(t, f)
	f.publish(t, doc.Sealed(t))
	f.waitState(t, doc.ID(), capsule.Paused)
	cp, err := f.client.Checkpoint(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.TriggerBlockedExternal, cp.State.Pause.Trigger)
	require.Contains(t, cp.State.Pause.Reason, "needs escalation (exit status 11)")
	require.Contains(t, cp.State.Pause.Reason, "try again")
	require.NotNil(t, cp.State.Attempts, "the failed attempt is recorded")
	require.NoError(t, schemas.ValidateValue(schemas.Checkpoint, cp))
	require.Len(t, calls(t, dir), 1)

	_, err = f.admin(t).Resume(ctx, doc.ID(), admin.ResumeOptions{By: "alice"})
	require.NoError(t, err)
	s := f.wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State, s.HaltReason)
	require.Equal(t, []string{doc.ID() + "/1", doc.ID() + "/1/a2"}, calls(t, dir))
	require.Equal(t, executors.ExitNeedsEscalation, request(t, dir, 2).PreviousFailure.ExitCode)
}

// TestFailurePolicyNATSRetryable: a NATS worker's failed reply with
// retryable: true is retried once; retryable: false halts.
func TestFailurePolicyNATSRetryable(t *testing.T) {
	t.Parallel()
	for _, retryable := range []bool{true, false} {
		t.Run(fmt.Sprint("retryable ", retryable), func(t *testing.T) {
			t.Parallel()
			var n atomic.Int64
			var keys atomic.Value
			keys.Store([]string{})
			var ex atomic.Pointer[executors.NATSExecutor]
			f := setupWith(t, func(c *pipeline.Config) { c.Executors.RegisterExecutor("flaky", lazyExecutor{&ex}) })
			nc, _ := natstest.Connect(t, f.srv)
			sub, err := nc.Subscribe("agents.flaky", func(m *nats.Msg) {
				keys.Store(append(keys.Load().([]string), m.Header.Get(executors.HeaderIdempotencyKey)))
				if n.Add(1) == 1 {
					_ = m.Respond([]byte(fmt.Sprintf(`{"status":"failed","error":"rate limited","retryable":%v,"usage":{"tokens":5,"dollars":0}}`, retryable)))
					return
				}
				_ = m.Respond([]byte(`{"status":"ok","content":{"ok":true},"usage":{"tokens":7,"dollars":0}}`))
			})
			require.NoError(t, err)
			t.Cleanup(func() { _ = sub.Unsubscribe() })
			require.NoError(t, nc.Flush())
			ex.Store(&executors.NATSExecutor{Conn: nc, Subject: "agents.flaky", Name: "flaky", Timeout: 5 * time.Second})
			doc := policyDoc(t, f)
			f.publish(t, doc.Sealed(t))
			s := f.wait(t, doc.ID())
			if !retryable {
				require.Equal(t, capsule.Halted, s.State)
				require.Equal(t, `executor_failed:nats executor "flaky": rate limited`, s.HaltReason)
				require.Equal(t, int64(1), n.Load())
				return
			}
			require.Equal(t, capsule.Completed, s.State, s.HaltReason)
			require.Equal(t, []string{doc.ID() + "/1", doc.ID() + "/1/a2"}, keys.Load())
		})
	}
}

// lazyExecutor serves a kind known at start with an executor made later.
type lazyExecutor struct {
	p *atomic.Pointer[executors.NATSExecutor]
}

func (l lazyExecutor) Execute(ctx context.Context, req executors.Request) (executors.Result, error) {
	return l.p.Load().Execute(ctx, req)
}

// failThenBlock fails its first call with exit status 1 and blocks its
// later ones on gate; it keeps every call's idempotency key.
type failThenBlock struct {
	n    *atomic.Int64
	keys *sync.Map
	gate chan struct{}
}

func (e failThenBlock) Execute(ctx context.Context, req executors.Request) (executors.Result, error) {
	n := e.n.Add(1)
	e.keys.Store(n, req.IdempotencyKey)
	if n == 1 {
		return executors.Result{}, &executors.FailedError{Detail: "exit 1", ExitCode: executors.ExitFailure}
	}
	select {
	case <-e.gate:
	case <-ctx.Done():
		return executors.Result{}, ctx.Err()
	}
	return executors.Stub{}.Execute(ctx, req)
}

// TestDuplicateDeliveryDuringRetry: the EXECUTION message delivered again
// while the policy's retry runs: the claim refuses the duplicate, the
// executor runs twice in all (the failure and its retry), never a third time.
func TestDuplicateDeliveryDuringRetry(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	var keys sync.Map
	gate := make(chan struct{})
	f := setupWith(t, func(c *pipeline.Config) {
		c.Executors.RegisterExecutor("retrying", failThenBlock{n: &n, keys: &keys, gate: gate})
	})
	doc := f.own(t, capsuletest.New().Set("task.kind", "retrying"))
	raw := doc.Sealed(t)
	f.publish(t, raw)
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { return n.Load() == 2 }, "the retry runs")

	m := nats.NewMsg("saga.phase.4")
	m.Data = raw
	m.Header.Set(store.HeaderKey, doc.ID())
	m.Header.Set(store.HeaderCycle, "1")
	_, err := f.js.PublishMsg(context.Background(), m)
	require.NoError(t, err)
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return consumerDelivered(t, f, 4) >= 2
	}, "duplicate delivered")
	gate <- struct{}{}
	s := f.wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State, s.HaltReason)
	waitDrained(t, f)
	require.Equal(t, int64(2), n.Load())
	k1, _ := keys.Load(int64(1))
	k2, _ := keys.Load(int64(2))
	require.Equal(t, doc.ID()+"/1", k1)
	require.Equal(t, doc.ID()+"/1/a2", k2)
	cp, err := f.client.Checkpoint(context.Background(), doc.ID())
	require.NoError(t, err)
	require.Equal(t, 1, cp.State.Attempts.Failed)
}

// TestFailurePolicyRetryOverBudget: a failed attempt whose usage crosses a
// cap halts budget_exceeded instead of retrying.
func TestFailurePolicyRetryOverBudget(t *testing.T) {
	t.Parallel()
	f, dir := setupFlaky(t, executors.ExitFailure, 1)
	doc := policyDoc(t, f).Set("budget.tokens", 4)
	f.publish(t, doc.Sealed(t))
	s := f.wait(t, doc.ID())
	require.Equal(t, capsule.Halted, s.State)
	require.True(t, strings.HasPrefix(s.HaltReason, "budget_exceeded"), s.HaltReason)
	require.Len(t, calls(t, dir), 1)
	cp, err := f.client.Checkpoint(context.Background(), doc.ID())
	require.NoError(t, err)
	require.Equal(t, int64(5), cp.State.BudgetUsed.Tokens)
}

// flakyReviewer is a command reviewer that fails its first `fails` calls
// with exit status code (5 tokens of usage, "diag <n>" on stderr), then
// approves with 3 tokens. Every request and idempotency key is kept in dir.
func flakyReviewer(dir string, code, fails int) executors.Command {
	script := fmt.Sprintf(`d=%q
n=$(( $(cat "$d/n" 2>/dev/null || echo 0) + 1 )); echo $n > "$d/n"
cat > "$d/req.$n"
echo "$SAGA_IDEMPOTENCY_KEY" >> "$d/keys"
if [ $n -le %d ]; then echo '{"status":"failed","error":"reviewer down","usage":{"tokens":5,"dollars":0}}'; echo "diag $n" >&2; exit %d; fi
echo '{"verdict":"APPROVED","usage":{"tokens":3,"dollars":0}}'
`, dir, fails, code)
	return executors.Command{Path: "/bin/sh", Args: []string{"-c", script}, Name: "flaky-reviewer"}
}

func reviewRequest(t *testing.T, dir string, n int) executors.ReviewCall {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("req.%d", n)))
	require.NoError(t, err)
	var call executors.ReviewCall
	require.NoError(t, json.Unmarshal(b, &call))
	return call
}

// reviewerPolicyDoc is a capsule reviewed by "flaky-reviewer" whose
// executor costs nothing, so its budget_used is the reviewer's usage alone.
func reviewerPolicyDoc(t *testing.T, f *fixture) capsuletest.Doc {
	return f.own(t, capsuletest.New().Set("review.reviewer_agent_id", "flaky-reviewer").Set("metadata.stub.usage", map[string]any{"tokens": 0, "dollars": 0}))
}

// TestReviewerFailurePolicy: a reviewer's failures follow the same table as
// an executor's: exit 1 and 12 are retried (attempt 2 with its own key and
// previous_failure, every attempt charged), exit 2 halts at once, and
// exit 11 pauses blocked_external until resume runs attempt 2.
func TestReviewerFailurePolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code, fails int
		calls       int
		state       capsule.State
	}{
		{executors.ExitFailure, 1, 2, capsule.Completed},
		{executors.ExitPartialSuccess, 2, 3, capsule.Completed},
		{executors.ExitFailure, 5, 2, capsule.Halted}, // one retry, then halt
		{executors.ExitDepthExceeded, 5, 1, capsule.Halted},
		{executors.ExitNeedsEscalation, 1, 2, capsule.Completed},
	} {
		t.Run(fmt.Sprintf("exit %d fails %d", tc.code, tc.fails), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dir := t.TempDir()
			f := setupWith(t, func(c *pipeline.Config) {
				c.Executors.RegisterReviewer("flaky-reviewer", flakyReviewer(dir, tc.code, tc.fails))
			})
			doc := reviewerPolicyDoc(t, f)
			f.publish(t, doc.Sealed(t))
			if tc.code == executors.ExitNeedsEscalation {
				f.waitState(t, doc.ID(), capsule.Paused)
				cp, err := f.client.Checkpoint(ctx, doc.ID())
				require.NoError(t, err)
				require.Equal(t, capsule.ReviewPhase, cp.State.Phase)
				require.Equal(t, capsule.TriggerBlockedExternal, cp.State.Pause.Trigger)
				require.Contains(t, cp.State.Pause.Reason, "reviewer down")
				n, _ := cp.State.FailedAttemptsAt(capsule.ReviewPhase, 1)
				require.Equal(t, 1, n, "the failed review is recorded")
				require.NoError(t, schemas.ValidateValue(schemas.Checkpoint, cp))
				_, err = f.admin(t).Resume(ctx, doc.ID(), admin.ResumeOptions{By: "alice"})
				require.NoError(t, err)
			}
			s := f.wait(t, doc.ID())
			require.Equal(t, tc.state, s.State, s.HaltReason)
			keys := calls(t, dir)
			require.Len(t, keys, tc.calls)
			for i, k := range keys {
				want := doc.ID() + "/1"
				if i > 0 {
					want += fmt.Sprintf("/a%d", i+1)
				}
				require.Equal(t, want, k)
				pf := reviewRequest(t, dir, i+1).PreviousFailure
				if i == 0 {
					require.Nil(t, pf)
					continue
				}
				require.NotNil(t, pf)
				require.Equal(t, i, pf.Attempt)
				require.Equal(t, tc.code, pf.ExitCode)
				require.Contains(t, pf.Error, "reviewer down")
				require.Contains(t, pf.StderrTail, fmt.Sprintf("diag %d", i))
			}
			cp, err := f.client.Checkpoint(ctx, doc.ID())
			require.NoError(t, err)
			failedCalls := min(tc.fails, tc.calls)
			want := int64(5 * failedCalls)
			if tc.state == capsule.Completed {
				want += 3
				require.Len(t, cp.State.Reviews, 1)
				require.Equal(t, capsule.Approved, cp.State.Reviews[0].Verdict)
			} else {
				require.True(t, strings.HasPrefix(s.HaltReason, `executor_failed:reviewer: command "flaky-reviewer"`), s.HaltReason)
			}
			require.Equal(t, want, cp.State.BudgetUsed.Tokens, "every attempt charged once")
		})
	}
}

// reviewFailThenBlock fails its first review with exit status 1 and blocks
// its later ones on gate; it keeps every call's idempotency key.
type reviewFailThenBlock struct {
	n    *atomic.Int64
	keys *sync.Map
	gate chan struct{}
}

func (r reviewFailThenBlock) Review(ctx context.Context, req executors.ReviewRequest) (executors.ReviewResult, error) {
	n := r.n.Add(1)
	r.keys.Store(n, req.IdempotencyKey)
	if n == 1 {
		return executors.ReviewResult{}, &executors.FailedError{Detail: "exit 1", ExitCode: executors.ExitFailure}
	}
	select {
	case <-r.gate:
	case <-ctx.Done():
		return executors.ReviewResult{}, ctx.Err()
	}
	return executors.StubReviewer{}.Review(ctx, req)
}

// TestDuplicateDeliveryDuringReviewRetry: the REVIEW message delivered
// again while the reviewer's retry runs: the claim refuses the duplicate,
// the reviewer runs twice in all (the failure and its retry), never a third
// time, and the capsule is reviewed once.
func TestDuplicateDeliveryDuringReviewRetry(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	var keys sync.Map
	gate := make(chan struct{})
	f := setupWith(t, func(c *pipeline.Config) {
		c.Executors.RegisterReviewer("retrying-reviewer", reviewFailThenBlock{n: &n, keys: &keys, gate: gate})
	})
	doc := f.own(t, capsuletest.New().Set("review.reviewer_agent_id", "retrying-reviewer"))
	raw := doc.Sealed(t)
	f.publish(t, raw)
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { return n.Load() == 2 }, "the retry runs")

	m := nats.NewMsg(store.PhaseSubject(capsule.ReviewPhase))
	m.Data = raw
	m.Header.Set(store.HeaderKey, doc.ID())
	m.Header.Set(store.HeaderCycle, "1")
	_, err := f.js.PublishMsg(context.Background(), m)
	require.NoError(t, err)
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return consumerDelivered(t, f, int(capsule.ReviewPhase)) >= 2
	}, "duplicate delivered")
	gate <- struct{}{}
	s := f.wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State, s.HaltReason)
	waitDrained(t, f)
	require.Equal(t, int64(2), n.Load())
	k1, _ := keys.Load(int64(1))
	k2, _ := keys.Load(int64(2))
	require.Equal(t, doc.ID()+"/1", k1)
	require.Equal(t, doc.ID()+"/1/a2", k2)
	cp, err := f.client.Checkpoint(context.Background(), doc.ID())
	require.NoError(t, err)
	require.Len(t, cp.State.Reviews, 1)
	got, _ := cp.State.FailedAttemptsAt(capsule.ReviewPhase, 1)
	require.Equal(t, 1, got)
}
