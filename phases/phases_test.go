package phases_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/locks"
	"github.com/sagad/sagad/phases"
	"github.com/sagad/sagad/rules"
	"github.com/sagad/sagad/schemas"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// now is the fixed clock of every test here.
var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeLocks answers Available per path (absent paths are available) and
// records what the phases asked for. It is safe for concurrent use.
type fakeLocks struct {
	mu         sync.Mutex
	held       map[string]bool // path → held by someone else
	availErr   error
	acquireErr error
	holders    []string
	acquired   [][]string
	renewed    int
}

func (l *fakeLocks) Available(_ context.Context, path, holder string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.holders = append(l.holders, holder)
	if l.availErr != nil {
		return false, l.availErr
	}
	return !l.held[path], nil
}

func (l *fakeLocks) AcquireAll(_ context.Context, paths []string, _ string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.acquireErr != nil {
		return l.acquireErr
	}
	l.acquired = append(l.acquired, append([]string(nil), paths...))
	return nil
}

func (l *fakeLocks) ReleaseAll(context.Context, []string, string) error { return nil }

func (l *fakeLocks) Renew(context.Context, []string, string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renewed++
	return nil
}

// charge is one recorded Budgets.Charge call.
type charge struct {
	capsuleID, waveID, chargeID string
	caps                        capsule.Budget
	usage                       capsule.Usage
}

// fakeBudgets sums charges per capsule and reports exceeded as the crossed cap.
type fakeBudgets struct {
	mu       sync.Mutex
	exceeded string
	err      error
	charges  []charge
	total    capsule.Usage
}

func (b *fakeBudgets) Charge(_ context.Context, capsuleID, waveID, chargeID string, caps capsule.Budget, _, u capsule.Usage) (budget.ChargeResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return budget.ChargeResult{}, b.err
	}
	b.charges = append(b.charges, charge{capsuleID, waveID, chargeID, caps, u})
	b.total = b.total.Add(u)
	return budget.ChargeResult{Capsule: b.total, Exceeded: b.exceeded}, nil
}

// fakeArtifacts keeps artifacts in memory under artifact:<capsule_id>/<cycle>.
type fakeArtifacts struct {
	mu     sync.Mutex
	byRef  map[string]capsule.Artifact
	putErr error
	getErr error
}

func newFakeArtifacts() *fakeArtifacts { return &fakeArtifacts{byRef: map[string]capsule.Artifact{}} }

func (a *fakeArtifacts) Put(_ context.Context, art capsule.Artifact) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.putErr != nil {
		return "", a.putErr
	}
	ref := fmt.Sprintf("artifact:%s/%d", art.CapsuleID, art.Cycle)
	a.byRef[ref] = art
	return ref, nil
}

func (a *fakeArtifacts) Lookup(_ context.Context, capsuleID string, cycle int) (capsule.Artifact, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	art, ok := a.byRef[fmt.Sprintf("artifact:%s/%d", capsuleID, cycle)]
	return art, ok, nil
}

func (a *fakeArtifacts) Get(_ context.Context, ref string) (capsule.Artifact, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.getErr != nil {
		return capsule.Artifact{}, a.getErr
	}
	art, ok := a.byRef[ref]
	if !ok {
		return capsule.Artifact{}, fmt.Errorf("artifact %s not found", ref)
	}
	return art, nil
}

// bundle is one test's Env and the fakes behind it.
type bundle struct {
	env       *phases.Env
	locks     *fakeLocks
	budgets   *fakeBudgets
	artifacts *fakeArtifacts
	registry  *executors.Registry
	runs      *atomic.Int64 // runs of the "stub" executor
	tokens    *tokenLog     // completion tokens of errorExecutor's calls
}

// tokenLog keeps the completion token of every call it sees.
type tokenLog struct {
	mu   sync.Mutex
	seen []string
}

func (l *tokenLog) add(token string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, token)
}

func (l *tokenLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.seen...)
}

func setup(t testing.TB) *bundle {
	t.Helper()
	b := &bundle{
		locks:     &fakeLocks{held: map[string]bool{}},
		budgets:   &fakeBudgets{},
		artifacts: newFakeArtifacts(),
		registry:  executors.NewRegistry(),
		runs:      new(atomic.Int64),
		tokens:    &tokenLog{},
	}
	b.registry.RegisterExecutor(executors.StubKind, countingStub{n: b.runs})
	b.env = &phases.Env{
		Locks:      b.locks,
		Budgets:    b.budgets,
		Artifacts:  b.artifacts,
		Executors:  b.registry,
		Rules:      rules.Config{}.WithDefaults(),
		Now:        func() time.Time { return now },
		RetryDelay: 250 * time.Millisecond,
	}
	return b
}

// newDoc is capsuletest.New with timestamps around the fixed clock.
func newDoc() capsuletest.Doc {
	return capsuletest.New().
		Set("created_at", now.Add(-time.Minute).Format(time.RFC3339)).
		Set("deadline", now.Add(time.Hour).Format(time.RFC3339))
}

func decode(t testing.TB, raw []byte) *capsule.Capsule {
	t.Helper()
	c := new(capsule.Capsule)
	require.NoError(t, json.Unmarshal(raw, c))
	return c
}

func rulesOf(fs []capsule.Finding) []int {
	out := make([]int, len(fs))
	for i, f := range fs {
		out[i] = f.Rule
	}
	return out
}

func TestMissingSpecFields(t *testing.T) {
	t.Parallel()
	at := now.Add(-time.Hour)
	zero := time.Time{}
	complete := func() capsule.Spec {
		return capsule.Spec{
			Approved:           true,
			ApprovedBy:         "human-lead",
			ApprovedAt:         &at,
			AcceptanceCriteria: []string{"it works"},
			ProblemStatement:   "it does not work",
			DefinitionOfDone:   "the reviewer approves",
		}
	}
	tests := []struct {
		name   string
		change func(*capsule.Spec)
		want   []string
	}{
		{name: "complete", change: func(*capsule.Spec) {}, want: nil},
		{name: "not approved", change: func(s *capsule.Spec) { s.Approved = false }, want: []string{"approved"}},
		{name: "approved_by empty", change: func(s *capsule.Spec) { s.ApprovedBy = "" }, want: []string{"approved_by"}},
		{name: "approved_by blank", change: func(s *capsule.Spec) { s.ApprovedBy = " \t" }, want: []string{"approved_by"}},
		{name: "approved_at nil", change: func(s *capsule.Spec) { s.ApprovedAt = nil }, want: []string{"approved_at"}},
		{name: "approved_at zero", change: func(s *capsule.Spec) { s.ApprovedAt = &zero }, want: []string{"approved_at"}},
		{name: "acceptance_criteria nil", change: func(s *capsule.Spec) { s.AcceptanceCriteria = nil }, want: []string{"acceptance_criteria"}},
		{name: "acceptance_criteria empty", change: func(s *capsule.Spec) { s.AcceptanceCriteria = []string{} }, want: []string{"acceptance_criteria"}},
		{name: "problem_statement blank", change: func(s *capsule.Spec) { s.ProblemStatement = "  " }, want: []string{"problem_statement"}},
		{name: "definition_of_done empty", change: func(s *capsule.Spec) { s.DefinitionOfDone = "" }, want: []string{"definition_of_done"}},
		{
			name:   "all missing",
			change: func(s *capsule.Spec) { *s = capsule.Spec{} },
			want:   []string{"approved", "approved_by", "approved_at", "acceptance_criteria", "problem_statement", "definition_of_done"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := complete()
			tt.change(&s)
			require.Equal(t, tt.want, phases.MissingSpecFields(s))
		})
	}
}

func TestPlanningRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := decode(t, newDoc().Set("spec.approved", false).Delete("spec.definition_of_done").Sealed(t))
	d := phases.Planning{}.Run(context.Background(), b.env, &phases.Input{Capsule: c})
	require.Equal(t, phases.Halt, d.Action)
	require.Equal(t, "spec_not_approved:[approved, definition_of_done]", d.Halt.String())
	require.Equal(t, []capsule.Finding{
		{Rule: 35, Title: "Spec approved before work", Field: "spec.approved", Message: "spec.approved is missing or unsatisfied"},
		{Rule: 35, Title: "Spec approved before work", Field: "spec.definition_of_done", Message: "spec.definition_of_done is missing or unsatisfied"},
	}, d.Findings)

	ok := phases.Planning{}.Run(context.Background(), b.env, &phases.Input{Capsule: decode(t, newDoc().Sealed(t))})
	require.Equal(t, phases.Advance, ok.Action)
	require.True(t, ok.Halt.IsZero())
}

func TestReviewDecision(t *testing.T) {
	t.Parallel()
	policy := func(maxCycles int) int {
		c := capsule.Capsule{Review: capsule.ReviewPolicy{MaxCycles: maxCycles}}
		return c.CycleLimit()
	}
	tests := []struct {
		name       string
		verdict    capsule.Verdict
		cycle      int
		limit      int
		wantAction phases.Action
		wantHalt   string
	}{
		{"approved cycle 1", capsule.Approved, 1, 3, phases.Advance, ""},
		{"approved on the last cycle", capsule.Approved, 3, 3, phases.Advance, ""},
		{"changes requested cycle 1 loops", capsule.ChangesRequested, 1, 3, phases.LoopBack, ""},
		{"changes requested cycle 2 loops", capsule.ChangesRequested, 2, 3, phases.LoopBack, ""},
		{"changes requested cycle 3 halts", capsule.ChangesRequested, 3, 3, phases.Halt, "max_cycles_exceeded:3"},
		{"rejected cycle 1 halts at once", capsule.Rejected, 1, 3, phases.Halt, "review_rejected_terminal"},
		{"rejected cycle 2 halts at once", capsule.Rejected, 2, 3, phases.Halt, "review_rejected_terminal"},
		{"unknown verdict is a rejection", capsule.Verdict("MAYBE"), 1, 3, phases.Halt, "review_rejected_terminal"},
		// review.max_cycles lowers the limit through CycleLimit.
		{"max_cycles 2: cycle 1 loops", capsule.ChangesRequested, 1, policy(2), phases.LoopBack, ""},
		{"max_cycles 2: cycle 2 halts", capsule.ChangesRequested, 2, policy(2), phases.Halt, "max_cycles_exceeded:2"},
		{"max_cycles 1: cycle 1 halts", capsule.ChangesRequested, 1, policy(1), phases.Halt, "max_cycles_exceeded:1"},
		{"max_cycles 1: approval advances", capsule.Approved, 1, policy(1), phases.Advance, ""},
		// It may never raise the limit, and nonsense is the ceiling.
		{"max_cycles 5 stays at 3: cycle 3 halts", capsule.ChangesRequested, 3, policy(5), phases.Halt, "max_cycles_exceeded:3"},
		{"max_cycles 0 is the ceiling: cycle 2 loops", capsule.ChangesRequested, 2, policy(0), phases.LoopBack, ""},
		{"max_cycles -1 is the ceiling: cycle 3 halts", capsule.ChangesRequested, 3, policy(-1), phases.Halt, "max_cycles_exceeded:3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := phases.ReviewDecision(tt.verdict, tt.cycle, tt.limit)
			require.Equal(t, tt.wantAction, d.Action)
			require.Equal(t, tt.wantHalt, d.Halt.String())
		})
	}
}

func TestEnforceIndependence(t *testing.T) {
	t.Parallel()
	prior := capsule.Finding{Message: "looks fine"}
	rule15 := capsule.Finding{
		Rule: 15, Title: "Reviewer is never the producer", Field: "review.reviewer_agent_id",
		Message: `reviewer "agent-coder-1" is the artifact's producer; approval refused`,
	}
	tests := []struct {
		name               string
		reviewer, producer string
		in                 executors.ReviewResult
		want               executors.ReviewResult
	}{
		{
			name: "approval by the producer becomes a rejection", reviewer: "agent-coder-1", producer: "agent-coder-1",
			in:   executors.ReviewResult{Verdict: capsule.Approved, Findings: []capsule.Finding{prior}, Usage: capsule.Usage{Tokens: 7}},
			want: executors.ReviewResult{Verdict: capsule.Rejected, Findings: []capsule.Finding{prior, rule15}, Usage: capsule.Usage{Tokens: 7}},
		},
		{
			name: "approval by the producer without findings", reviewer: "agent-coder-1", producer: "agent-coder-1",
			in:   executors.ReviewResult{Verdict: capsule.Approved},
			want: executors.ReviewResult{Verdict: capsule.Rejected, Findings: []capsule.Finding{rule15}},
		},
		{
			name: "changes requested by the producer is left alone", reviewer: "agent-coder-1", producer: "agent-coder-1",
			in:   executors.ReviewResult{Verdict: capsule.ChangesRequested, Findings: []capsule.Finding{prior}},
			want: executors.ReviewResult{Verdict: capsule.ChangesRequested, Findings: []capsule.Finding{prior}},
		},
		{
			name: "rejection by the producer is left alone", reviewer: "agent-coder-1", producer: "agent-coder-1",
			in:   executors.ReviewResult{Verdict: capsule.Rejected},
			want: executors.ReviewResult{Verdict: capsule.Rejected},
		},
		{
			name: "approval by another reviewer stays", reviewer: "stub-reviewer", producer: "agent-coder-1",
			in:   executors.ReviewResult{Verdict: capsule.Approved, Usage: capsule.Usage{Tokens: 3}},
			want: executors.ReviewResult{Verdict: capsule.Approved, Usage: capsule.Usage{Tokens: 3}},
		},
		{
			name: "ids differing only in case are different agents", reviewer: "Agent-Coder-1", producer: "agent-coder-1",
			in:   executors.ReviewResult{Verdict: capsule.Approved},
			want: executors.ReviewResult{Verdict: capsule.Approved},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, phases.EnforceIndependence(tt.reviewer, tt.producer, tt.in))
		})
	}
}

func TestReceive(t *testing.T) {
	t.Parallel()
	valid := newDoc()
	tests := []struct {
		name     string
		raw      []byte
		held     []string
		maxBytes int
		want     string // halt reason; "" for Advance
		wantID   string // ClaimedID
		findings []capsule.Finding
	}{
		{name: "oversized", raw: []byte(`{"capsule_id":"` + strings.Repeat("a", 100) + `"}`), maxBytes: 64, want: "capsule_too_large:117"},
		{name: "one byte over the limit", raw: []byte(`{"a":"bc"}`), maxBytes: 9, want: "capsule_too_large:10"},
		{name: "exactly at the limit is read", raw: []byte(`{"a":"bc"}`), maxBytes: 10, want: "schema_invalid:/a,/budget,/capsule_id,/constraints,/context_refs,/created_at,/deadline,/integrity,/producer_agent_id,/review,/schema_version,/spec,/target,/task"},
		{name: "not JSON: empty", raw: []byte(``), want: "not_json"},
		{name: "not JSON: whitespace", raw: []byte(" \n\t"), want: "not_json"},
		{name: "not JSON: array", raw: []byte(`[{"capsule_id":"x"}]`), want: "not_json"},
		{name: "not JSON: string", raw: []byte(`"capsule"`), want: "not_json"},
		{name: "not JSON: truncated", raw: valid.Sealed(t)[:40], want: "not_json"},
		{name: "not JSON: plain text", raw: []byte("hello, sagad"), want: "not_json"},
		{name: "not JSON: object then garbage", raw: []byte(`{"a":1} x`), want: "not_json"},
		{name: "not JSON: invalid UTF-8", raw: []byte("{\"a\":\"\xff\"}"), want: "not_json"},
		{
			name: "unsupported major version", raw: newDoc().Set("capsule_id", "0190a8f2-6c1e-7b7a-9a39-7c1f5b2c9e01").Set("schema_version", "2.0").Sealed(t),
			want: "unsupported_schema_version:2.0", wantID: "0190a8f2-6c1e-7b7a-9a39-7c1f5b2c9e01",
		},
		{name: "supported major, other minor", raw: newDoc().Set("schema_version", "1.7").Sealed(t), want: ""},
		{name: "unreadable version is the schema's", raw: newDoc().Set("schema_version", "one").Sealed(t), want: "schema_invalid:/schema_version"},
		{name: "schema invalid: missing member", raw: newDoc().Delete("task").Sealed(t), want: "schema_invalid:/task"},
		{
			name: "schema invalid: every pointer, sorted",
			raw:  newDoc().Delete("target").Set("budget.tokens", "many").Set("bogus", true).Sealed(t),
			want: "schema_invalid:/bogus,/budget/tokens,/target",
		},
		{name: "schema invalid: unsealed has no integrity", raw: newDoc().Unsealed(t), want: "schema_invalid:/integrity"},
		{
			name: "integrity mismatch", raw: newDoc().Set("integrity", map[string]any{"sha256": strings.Repeat("0", 64)}).Unsealed(t),
			want: "integrity_mismatch",
		},
		{
			name: "deadline in the past", raw: newDoc().Set("deadline", now.Add(-time.Second).Format(time.RFC3339)).Sealed(t),
			want:     "deadline_in_past",
			findings: []capsule.Finding{{Field: "deadline", Message: "deadline 2026-03-01T11:59:59Z has passed"}},
		},
		{name: "deadline exactly now", raw: newDoc().Set("deadline", now.Format(time.RFC3339)).Sealed(t), want: "deadline_in_past"},
		{
			name: "tokens zero", raw: newDoc().Set("budget.tokens", 0).Sealed(t), want: "budget_tokens_non_positive",
			findings: []capsule.Finding{{Field: "budget.tokens", Message: "budget.tokens is 0"}},
		},
		{
			name: "tokens negative", raw: newDoc().Set("budget.tokens", -5).Sealed(t), want: "budget_tokens_non_positive",
			findings: []capsule.Finding{{Field: "budget.tokens", Message: "budget.tokens is -5"}},
		},
		{
			name: "dollars zero", raw: newDoc().Set("budget.dollars", 0).Sealed(t), want: "budget_dollars_non_positive",
			findings: []capsule.Finding{{Field: "budget.dollars", Message: "budget.dollars is 0"}},
		},
		{
			name: "dollars negative", raw: newDoc().Set("budget.dollars", -0.25).Sealed(t), want: "budget_dollars_non_positive",
			findings: []capsule.Finding{{Field: "budget.dollars", Message: "budget.dollars is -0.25"}},
		},
		{name: "tokens are checked first", raw: newDoc().Set("budget.tokens", 0).Set("budget.dollars", 0).Sealed(t), want: "budget_tokens_non_positive"},
		{name: "a cent is positive", raw: newDoc().Set("budget.dollars", 0.01).Sealed(t), want: ""},
		{name: "lock held", raw: newDoc().Sealed(t), held: []string{"README.md"}, want: "lock_unavailable:README.md"},
		{
			name: "second lock held", raw: newDoc().Set("constraints.resource_locks_required", []any{"README.md", "docs/a.md", "docs/b.md"}).Sealed(t),
			held: []string{"docs/a.md", "docs/b.md"}, want: "lock_unavailable:docs/a.md",
		},
		{name: "other locks held", raw: newDoc().Sealed(t), held: []string{"go.mod"}, want: ""},
		{
			// A composition's step takes its locks at EXECUTION (its
			// membership is checked next, by the pipeline).
			name: "a composition step's lock held", raw: newDoc().Set("chain", map[string]any{"id": "c", "step": 1}).Sealed(t),
			held: []string{"README.md"}, want: "",
		},
		{name: "valid", raw: valid.Sealed(t), want: "", wantID: valid.ID()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.env.MaxIntakeBytes = tt.maxBytes
			for _, p := range tt.held {
				b.locks.held[p] = true
			}
			r := phases.Receive(context.Background(), b.env, tt.raw, func(id string) string { return "key-" + id })
			if tt.want == "" {
				require.Equal(t, phases.Advance, r.Decision.Action, "halt: %s %v", r.Decision.Halt, r.Decision.Findings)
				require.NotNil(t, r.Capsule)
				want, err := capsule.Digest(tt.raw)
				require.NoError(t, err)
				require.Equal(t, want, r.Digest)
				require.Equal(t, r.Capsule.CapsuleID, r.ClaimedID)
			} else {
				require.Equal(t, phases.Halt, r.Decision.Action)
				require.Equal(t, tt.want, r.Decision.Halt.String())
			}
			if tt.wantID != "" {
				require.Equal(t, tt.wantID, r.ClaimedID)
			}
			if tt.findings != nil {
				require.Equal(t, tt.findings, r.Decision.Findings)
			}
		})
	}
}

func TestReceiveDetails(t *testing.T) {
	t.Parallel()

	t.Run("lock holder is the checkpoint key", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		doc := newDoc().Set("constraints.resource_locks_required", []any{"a", "b"})
		r := phases.Receive(context.Background(), b.env, doc.Sealed(t), func(id string) string { return "key-" + id })
		require.Equal(t, phases.Advance, r.Decision.Action)
		require.Equal(t, []string{"key-" + doc.ID(), "key-" + doc.ID()}, b.locks.holders)
	})

	t.Run("lock lookup failure retries", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.locks.availErr = errors.New("kv down")
		r := phases.Receive(context.Background(), b.env, newDoc().Sealed(t), func(id string) string { return id })
		require.Equal(t, phases.Retry, r.Decision.Action)
		require.Zero(t, r.Decision.Delay, "no delay of its own: the runner's retry delay")
		require.ErrorContains(t, r.Decision.Err, `reception: lock "README.md": kv down`)
		require.True(t, r.Decision.Halt.IsZero())
	})

	t.Run("integrity finding names both digests", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		raw := newDoc().Set("integrity", map[string]any{"sha256": strings.Repeat("0", 64)}).Unsealed(t)
		digest, err := capsule.Digest(raw)
		require.NoError(t, err)
		r := phases.Receive(context.Background(), b.env, raw, func(id string) string { return id })
		require.Equal(t, []capsule.Finding{{
			Field:   "integrity.sha256",
			Message: fmt.Sprintf("declared %q, computed %q", strings.Repeat("0", 64), digest),
		}}, r.Decision.Findings)
		require.NotNil(t, r.Capsule, "the capsule was readable")
	})

	t.Run("default intake limit applies when unset", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		raw := []byte(`{"pad":"` + strings.Repeat("x", phases.DefaultMaxIntakeBytes) + `"}`)
		r := phases.Receive(context.Background(), b.env, raw, func(id string) string { return id })
		require.Equal(t, fmt.Sprintf("capsule_too_large:%d", len(raw)), r.Decision.Halt.String())
	})

	t.Run("schema findings carry the pointer as field", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := phases.Receive(context.Background(), b.env, newDoc().Delete("task").Sealed(t), func(id string) string { return id })
		require.Equal(t, []capsule.Finding{{Field: "/task", Message: "required property missing"}}, r.Decision.Findings)
	})

	// A producer's integer with an exponent math/big refuses: the schema
	// library dereferenced the nil it got and the panic ended sagad.
	t.Run("an integer past math/big halts schema_invalid", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		raw := newDoc().Set("budget.tokens", json.Number("1e2000000")).Unsealed(t)
		r := phases.Receive(context.Background(), b.env, raw, func(id string) string { return id })
		require.Equal(t, "schema_invalid:/budget/tokens", r.Decision.Halt.String())
		require.Equal(t, []capsule.Finding{{Field: "/budget/tokens", Message: "number out of range"}}, r.Decision.Findings)
	})
}

// TestReceiveZeroRules: rules.Config documents its zero value as the default
// constitution, yet Receive reads SupportedMajors without defaults, so an Env
// built with a zero rules.Config refuses every capsule.
func TestReceiveZeroRules(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.env.Rules = rules.Config{}
	r := phases.Receive(context.Background(), b.env, newDoc().Sealed(t), func(id string) string { return id })
	require.Equal(t, phases.Advance, r.Decision.Action, "halt: %s", r.Decision.Halt)
}

// execInput is the input of EXECUTION or REVIEW for doc at cycle.
func execInput(t testing.TB, raw []byte, cycle int) *phases.Input {
	t.Helper()
	c := decode(t, raw)
	return &phases.Input{
		Capsule: c,
		Raw:     raw,
		Checkpoint: &capsule.Checkpoint{
			CapsuleID: c.CapsuleID, Key: c.CapsuleID, TraceID: "trace-1",
			State: capsule.CheckpointState{Phase: capsule.Execution, Cycle: cycle, Status: capsule.InProgress},
		},
		Claim: func(context.Context) error { return nil },
	}
}

// blockingExecutor runs until its ctx ends.
type blockingExecutor struct{ started chan struct{} }

func (e blockingExecutor) Execute(ctx context.Context, _ executors.Request) (executors.Result, error) {
	close(e.started)
	<-ctx.Done()
	return executors.Result{}, ctx.Err()
}

// errorExecutor answers with err and no result; tokens, when set, keeps
// the completion token of every call.
type errorExecutor struct {
	err    error
	tokens *tokenLog
}

func (e errorExecutor) Execute(_ context.Context, req executors.Request) (executors.Result, error) {
	if e.tokens != nil {
		e.tokens.add(req.CompletionToken)
	}
	return executors.Result{}, e.err
}

// countingStub is the stub executor counting its runs.
type countingStub struct{ n *atomic.Int64 }

func (c countingStub) Execute(ctx context.Context, req executors.Request) (executors.Result, error) {
	c.n.Add(1)
	return executors.Stub{}.Execute(ctx, req)
}

func TestExecutionRun(t *testing.T) {
	t.Parallel()
	heldErr := &locks.AcquireError{Path: "README.md", Err: &locks.HeldError{Path: "README.md", Holder: "other", Owner: "host/1", ExpiresAt: now}}
	holdLock := func(wait time.Duration, entered time.Time) func(*bundle, *phases.Input) {
		return func(b *bundle, in *phases.Input) {
			b.locks.acquireErr = heldErr
			b.env.LockWait = wait
			in.Entered = entered
		}
	}
	past := now.Add(-time.Second)
	stubUsage := executors.DefaultStubUsage
	tests := []struct {
		name       string
		doc        func(capsuletest.Doc) capsuletest.Doc
		cycle      int
		prepare    func(*bundle, *phases.Input)
		wantAction phases.Action
		wantHalt   string
		wantRules  []int
		// wantTrigger and wantReason are the pause a Park (or a warning) asks for.
		wantTrigger capsule.Trigger
		// wantAwaiting: a park that records the cycle whose result it awaits.
		wantAwaiting bool
		wantReason   string
		// wantDelay is a Retry's delay (0: the runner's retry delay).
		wantDelay time.Duration
		// wantRuns is how often the stub executor ran.
		wantRuns int64
		// wantUsed is the capsule total the decision records; nil when it
		// records no charge.
		wantUsed *capsule.Usage
		// wantCaps are the caps charged against; the capsule's when zero.
		wantCaps capsule.Budget
		// wantResult says whether an artifact result is recorded.
		wantResult bool
		// wantStored says whether a new artifact was stored.
		wantStored bool
	}{
		{
			name: "success", wantAction: phases.Advance, wantRuns: 1,
			wantUsed: &stubUsage, wantResult: true, wantStored: true,
		},
		{
			name: "scripted usage on cycle 2",
			doc: func(d capsuletest.Doc) capsuletest.Doc {
				return d.Stub(map[string]any{"usage": map[string]any{"tokens": 42, "dollars": 0.5}})
			},
			cycle: 2, wantAction: phases.Advance, wantRuns: 1,
			wantUsed: &capsule.Usage{Tokens: 42, Dollars: 0.5}, wantResult: true, wantStored: true,
		},
		{
			name:       "executor failure with a message",
			doc:        func(d capsuletest.Doc) capsuletest.Doc { return d.Stub(map[string]any{"fail": "model refused"}) },
			wantAction: phases.Halt, wantHalt: "executor_failed:model refused", wantRules: []int{}, wantRuns: 1,
			wantUsed: &stubUsage,
		},
		{
			name:       "executor failure requested with true",
			doc:        func(d capsuletest.Doc) capsuletest.Doc { return d.Stub(map[string]any{"fail": true}) },
			wantAction: phases.Halt, wantHalt: "executor_failed:stub failure requested", wantRules: []int{}, wantRuns: 1,
			wantUsed: &stubUsage,
		},
		{
			name: "transport error is an executor failure",
			prepare: func(b *bundle, _ *phases.Input) {
				b.registry.RegisterExecutor(executors.StubKind, errorExecutor{err: errors.New("connection refused")})
			},
			wantAction: phases.Halt, wantHalt: "executor_failed:connection refused", wantRules: []int{},
			wantUsed: &capsule.Usage{},
		},
		{
			name:       "budget exceeded",
			prepare:    func(b *bundle, _ *phases.Input) { b.budgets.exceeded = capsule.BudgetTokens },
			wantAction: phases.Halt, wantHalt: "budget_exceeded:tokens", wantRules: []int{16}, wantRuns: 1,
			wantUsed: &stubUsage, wantResult: true, wantStored: true,
		},
		{
			name:       "budget exceeded in dollars",
			prepare:    func(b *bundle, _ *phases.Input) { b.budgets.exceeded = capsule.BudgetDollars },
			wantAction: phases.Halt, wantHalt: "budget_exceeded:dollars", wantRules: []int{16}, wantRuns: 1,
			wantUsed: &stubUsage, wantResult: true, wantStored: true,
		},
		{
			name:       "raised caps are the caps charged against",
			prepare:    func(_ *bundle, in *phases.Input) { in.Checkpoint.State.Overrides = &capsule.Overrides{Tokens: 20000} },
			wantAction: phases.Advance, wantRuns: 1,
			wantUsed: &stubUsage, wantCaps: capsule.Budget{Tokens: 20000, Dollars: 5}, wantResult: true, wantStored: true,
		},
		{
			name:       "budget warning past the threshold",
			prepare:    func(b *bundle, _ *phases.Input) { b.env.BudgetWarning = 0.05 },
			wantAction: phases.Advance, wantRuns: 1,
			wantTrigger: capsule.TriggerBudgetWarning, wantReason: "10% of a budget cap used (1000 tokens, $0.0100 of 10000 tokens, $5.0000)",
			wantUsed: &stubUsage, wantResult: true, wantStored: true,
		},
		{
			name:       "budget warning under the threshold",
			prepare:    func(b *bundle, _ *phases.Input) { b.env.BudgetWarning = 0.5 },
			wantAction: phases.Advance, wantRuns: 1,
			wantUsed: &stubUsage, wantResult: true, wantStored: true,
		},
		{
			name: "budget warning fires once",
			prepare: func(b *bundle, in *phases.Input) {
				b.env.BudgetWarning = 0.05
				in.Checkpoint.State.Warned = []capsule.Trigger{capsule.TriggerBudgetWarning}
			},
			wantAction: phases.Advance, wantRuns: 1,
			wantUsed: &stubUsage, wantResult: true, wantStored: true,
		},
		{
			name: "recorded result is not run again",
			prepare: func(_ *bundle, in *phases.Input) {
				in.Checkpoint.State.Result = &capsule.ExecutionResult{Cycle: 1, ArtifactRef: "artifact:" + in.Capsule.CapsuleID + "/1", Usage: capsule.Usage{Tokens: 77}}
			},
			wantAction: phases.Advance, wantRuns: 0,
			wantUsed: &capsule.Usage{Tokens: 77}, wantResult: true,
		},
		{
			name: "recorded failure is not run again",
			prepare: func(_ *bundle, in *phases.Input) {
				in.Checkpoint.State.Result = &capsule.ExecutionResult{Cycle: 1, Failed: "worker timed out", Usage: capsule.Usage{Tokens: 5}}
			},
			wantAction: phases.Halt, wantHalt: "executor_failed:worker timed out", wantRules: []int{}, wantRuns: 0,
			wantUsed: &capsule.Usage{Tokens: 5},
		},
		{
			name:  "an earlier cycle's result is not this cycle's",
			cycle: 2,
			prepare: func(_ *bundle, in *phases.Input) {
				in.Checkpoint.State.Result = &capsule.ExecutionResult{Cycle: 1, ArtifactRef: "artifact:" + in.Capsule.CapsuleID + "/1"}
			},
			wantAction: phases.Advance, wantRuns: 1,
			wantUsed: &stubUsage, wantResult: true, wantStored: true,
		},
		{
			name: "accepted work parks",
			prepare: func(b *bundle, _ *phases.Input) {
				b.registry.RegisterExecutor(executors.StubKind, errorExecutor{err: &executors.AcceptedError{Subject: "saga.done.x"}, tokens: b.tokens})
			},
			wantAction: phases.Park, wantTrigger: capsule.TriggerBlockedExternal, wantAwaiting: true,
			wantReason: "waiting for the executor's result: executors: accepted, result follows on saga.done.x",
		},
		{
			name: "human input parks",
			prepare: func(b *bundle, _ *phases.Input) {
				b.registry.RegisterExecutor(executors.StubKind, errorExecutor{err: &executors.HumanInputError{Detail: "which file?"}})
			},
			wantAction: phases.Park, wantTrigger: capsule.TriggerBlockedExternal,
			wantReason: "the executor needs human input: executors: human input required: which file?",
		},
		{
			name:       "lock held, strict Rule 17",
			prepare:    holdLock(-1, time.Time{}),
			wantAction: phases.Halt, wantHalt: "lock_acquisition_failed:README.md", wantRules: []int{17},
		},
		{
			name: "lock held past the deadline",
			prepare: func(b *bundle, in *phases.Input) {
				holdLock(time.Minute, now.Add(-time.Second))(b, in)
				in.Checkpoint.State.Overrides = &capsule.Overrides{Deadline: &past}
			},
			wantAction: phases.Halt, wantHalt: "lock_acquisition_failed:README.md", wantRules: []int{17},
		},
		{
			name:       "lock held, still waiting",
			prepare:    holdLock(10*time.Second, now.Add(-time.Second)),
			wantAction: phases.Retry, wantDelay: time.Second,
		},
		{
			name:       "lock held, waits at most 5s between tries",
			prepare:    holdLock(time.Hour, now.Add(-time.Second)),
			wantAction: phases.Retry, wantDelay: 5 * time.Second,
		},
		{
			name:       "lock held too long parks",
			prepare:    holdLock(10*time.Second, now.Add(-11*time.Second)),
			wantAction: phases.Park, wantTrigger: capsule.TriggerLockContention,
			wantReason: "lock README.md held by another capsule for over 10s",
		},
		{
			name:       "lock store failure retries",
			prepare:    func(b *bundle, _ *phases.Input) { b.locks.acquireErr = errors.New("kv timeout") },
			wantAction: phases.Retry, wantDelay: 0,
		},
		{
			name: "claim held elsewhere retries",
			prepare: func(_ *bundle, in *phases.Input) {
				in.Claim = func(context.Context) error { return phases.ErrClaimHeld }
			},
			wantAction: phases.Retry, wantDelay: 0,
		},
		{
			name:       "no executor for the kind",
			doc:        func(d capsuletest.Doc) capsuletest.Doc { return d.Set("task.kind", "poetry") },
			wantAction: phases.Halt, wantHalt: "executor_failed:no executor for task.kind poetry", wantRules: []int{22},
		},
		{
			name:       "budget store failure retries",
			prepare:    func(b *bundle, _ *phases.Input) { b.budgets.err = errors.New("kv down") },
			wantAction: phases.Retry, wantDelay: 0, wantRuns: 1,
		},
		{
			name:       "artifact store failure retries",
			prepare:    func(b *bundle, _ *phases.Input) { b.artifacts.putErr = errors.New("object store down") },
			wantAction: phases.Retry, wantDelay: 0, wantRuns: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			doc := newDoc()
			if tt.doc != nil {
				doc = tt.doc(doc)
			}
			cycle := tt.cycle
			if cycle == 0 {
				cycle = 1
			}
			in := execInput(t, doc.Sealed(t), cycle)
			if tt.prepare != nil {
				tt.prepare(b, in)
			}
			ctx := context.Background()
			if tt.wantAction == phases.Retry {
				// A live delivery keeps retrying the writes of an agent's
				// result while it holds its claim; it gives up (and the
				// message is retried) once the claim or the phase's time
				// ends, which this deadline stands for.
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
			}
			d := phases.Execution{}.Run(ctx, b.env, in)
			require.Equal(t, tt.wantAction, d.Action, "halt %s, err %v", d.Halt, d.Err)
			require.Equal(t, tt.wantHalt, d.Halt.String())
			require.Equal(t, tt.wantTrigger, d.Trigger)
			require.Equal(t, tt.wantReason, d.Reason)
			require.Equal(t, tt.wantRuns, b.runs.Load(), "executor runs")
			if tt.wantRules != nil {
				require.Equal(t, tt.wantRules, rulesOf(d.Findings))
			}
			switch tt.wantAction {
			case phases.Retry:
				require.Error(t, d.Err)
				require.Equal(t, tt.wantDelay, d.Delay)
				require.Nil(t, d.Record)
				return
			case phases.Park:
				require.Empty(t, b.budgets.charges, "parking charges nothing")
				require.Equal(t, tt.wantAwaiting, d.Record != nil, "records the awaited cycle")
				if d.Record != nil {
					st := capsule.CheckpointState{}
					d.Record.ApplyTo(&st)
					require.Equal(t, cycle, st.AwaitingCycle)
					// The call's token is never recorded, only its hash.
					tokens := b.tokens.all()
					require.Len(t, tokens, 1)
					require.Regexp(t, `^[0-9a-f]{64}$`, tokens[0])
					require.Equal(t, executors.CompletionTokenHash(tokens[0]), st.AwaitingTokenHash)
				}
				return
			}
			if tt.wantUsed == nil {
				require.Nil(t, d.Record, "nothing ran, nothing to record")
				require.Empty(t, b.budgets.charges)
				return
			}
			require.NotNil(t, d.Record)
			st := in.Checkpoint.State
			st.ArtifactRefs = []string{}
			st.Warned = append([]capsule.Trigger(nil), st.Warned...)
			d.Record.ApplyTo(&st)
			require.Equal(t, *tt.wantUsed, st.BudgetUsed)
			caps := tt.wantCaps
			if caps == (capsule.Budget{}) {
				caps = capsule.Budget{Tokens: 10000, Dollars: 5}
			}
			require.Equal(t, []charge{{
				capsuleID: doc.ID(), chargeID: fmt.Sprintf("%s/%d/exec", doc.ID(), cycle),
				caps: caps, usage: *tt.wantUsed,
			}}, b.budgets.charges)
			if tt.wantTrigger == capsule.TriggerBudgetWarning || in.Checkpoint.State.HasWarned(capsule.TriggerBudgetWarning) {
				require.Equal(t, []capsule.Trigger{capsule.TriggerBudgetWarning}, st.Warned)
			} else {
				require.Empty(t, st.Warned)
			}
			if !tt.wantResult {
				require.Equal(t, in.Checkpoint.State.Result, st.Result, "a failure records no new result")
				require.Empty(t, st.ArtifactRefs)
				return
			}
			ref := fmt.Sprintf("artifact:%s/%d", doc.ID(), cycle)
			require.Equal(t, &capsule.ExecutionResult{Cycle: cycle, ArtifactRef: ref, Usage: *tt.wantUsed}, st.Result)
			require.Equal(t, []string{ref}, st.ArtifactRefs)
			d.Record.ApplyTo(&st)
			require.Equal(t, []string{ref}, st.ArtifactRefs, "recording twice adds the ref once")
			require.Equal(t, [][]string{{"README.md"}}, b.locks.acquired)

			if !tt.wantStored {
				require.Empty(t, b.artifacts.byRef, "a recorded result stores no new artifact")
				return
			}
			art, err := b.artifacts.Get(context.Background(), ref)
			require.NoError(t, err)
			require.Equal(t, "1.0", art.SchemaVersion)
			require.Equal(t, doc.ID(), art.CapsuleID)
			require.Equal(t, "agent-coder-1", art.ProducerAgentID)
			require.Equal(t, cycle, art.Cycle)
			require.Equal(t, "application/json", art.MediaType)
			require.Equal(t, int64(len(art.Content)), art.Size)
			require.Equal(t, *tt.wantUsed, art.Usage)
			require.Equal(t, now, art.CreatedAt)
			sum := sha256.Sum256(art.Content)
			require.Equal(t, hex.EncodeToString(sum[:]), art.SHA256)
			var content map[string]any
			require.NoError(t, json.Unmarshal(art.Content, &content))
			require.Equal(t, fmt.Sprintf("%s/%d", doc.ID(), cycle), content["idempotency_key"])
		})
	}
}

func TestExecutionInterrupted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan struct{})
	b.registry.RegisterExecutor("slow", blockingExecutor{started: started})
	in := execInput(t, newDoc().Set("task.kind", "slow").Sealed(t), 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan phases.Decision, 1)
	go func() { done <- phases.Execution{Heartbeat: time.Millisecond}.Run(ctx, b.env, in) }()
	<-started
	cancel()
	d := <-done
	require.Equal(t, phases.Retry, d.Action)
	require.ErrorIs(t, d.Err, context.Canceled)
	require.Empty(t, b.budgets.charges, "an interrupted run charges nothing")
}

func TestExecutionHeartbeat(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan struct{})
	b.registry.RegisterExecutor("slow", blockingExecutor{started: started})
	in := execInput(t, newDoc().Set("task.kind", "slow").Sealed(t), 1)
	progressed := make(chan struct{}, 16)
	in.Progress = func() {
		select {
		case progressed <- struct{}{}:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan phases.Decision, 1)
	go func() { done <- phases.Execution{Heartbeat: 5 * time.Millisecond}.Run(ctx, b.env, in) }()
	<-started
	<-progressed
	<-progressed
	cancel()
	<-done
	b.locks.mu.Lock()
	defer b.locks.mu.Unlock()
	require.GreaterOrEqual(t, b.locks.renewed, 1, "locks are renewed with the heartbeat")
}

// errorReviewer answers with err and no review.
type errorReviewer struct{ err error }

func (r errorReviewer) Review(context.Context, executors.ReviewRequest) (executors.ReviewResult, error) {
	return executors.ReviewResult{}, r.err
}

// reviewInput is REVIEW's input with the cycle's artifact recorded, produced by producer.
func reviewInput(t testing.TB, b *bundle, raw []byte, cycle int, producer string) *phases.Input {
	t.Helper()
	in := execInput(t, raw, cycle)
	in.Checkpoint.State.Phase = capsule.ReviewPhase
	ref, err := b.artifacts.Put(context.Background(), capsule.Artifact{
		SchemaVersion: "1.0", CapsuleID: in.Capsule.CapsuleID, ProducerAgentID: producer, Cycle: cycle,
		MediaType: "application/json", Content: json.RawMessage(`{"summary":"done"}`),
	})
	require.NoError(t, err)
	in.Checkpoint.State.Result = &capsule.ExecutionResult{Cycle: cycle, ArtifactRef: ref}
	return in
}

func TestReviewRun(t *testing.T) {
	t.Parallel()
	stubFinding := func(v capsule.Verdict, cycle int) capsule.Finding {
		return capsule.Finding{Message: fmt.Sprintf("stub reviewer: %s on cycle %d", v, cycle)}
	}
	rule15 := capsule.Finding{
		Rule: 15, Title: "Reviewer is never the producer", Field: "review.reviewer_agent_id",
		Message: `reviewer "agent-coder-1" is the artifact's producer; approval refused`,
	}
	tests := []struct {
		name         string
		doc          func(capsuletest.Doc) capsuletest.Doc
		cycle        int
		producer     string // artifact producer; defaults to agent-coder-1
		prepare      func(*bundle, *phases.Input)
		wantAction   phases.Action
		wantHalt     string
		wantFindings []capsule.Finding
		// wantVerdict is the review recorded in the checkpoint; "" when none.
		wantVerdict capsule.Verdict
		// wantWait: the capsule waits for the operator before HANDOFF.
		wantWait    bool
		wantTrigger capsule.Trigger
		wantReason  string
		// wantCaps are the caps charged against; the capsule's when zero.
		wantCaps capsule.Budget
	}{
		{name: "approved", wantAction: phases.Advance, wantVerdict: capsule.Approved},
		{
			name: "changes requested loops back",
			doc: func(d capsuletest.Doc) capsuletest.Doc {
				return d.Stub(map[string]any{"reviews": []string{"CHANGES_REQUESTED"}})
			},
			wantAction: phases.LoopBack, wantVerdict: capsule.ChangesRequested,
			wantFindings: []capsule.Finding{stubFinding(capsule.ChangesRequested, 1)},
		},
		{
			name: "changes requested on the last cycle",
			doc: func(d capsuletest.Doc) capsuletest.Doc {
				return d.Stub(map[string]any{"reviews": []string{"CHANGES_REQUESTED", "CHANGES_REQUESTED", "CHANGES_REQUESTED"}})
			},
			cycle: 3, wantAction: phases.Halt, wantHalt: "max_cycles_exceeded:3", wantVerdict: capsule.ChangesRequested,
			wantFindings: []capsule.Finding{stubFinding(capsule.ChangesRequested, 3)},
		},
		{
			name: "review.max_cycles lowers the limit",
			doc: func(d capsuletest.Doc) capsuletest.Doc {
				return d.Set("review.max_cycles", 2).Stub(map[string]any{"reviews": []string{"CHANGES_REQUESTED", "CHANGES_REQUESTED"}})
			},
			cycle: 2, wantAction: phases.Halt, wantHalt: "max_cycles_exceeded:2", wantVerdict: capsule.ChangesRequested,
			wantFindings: []capsule.Finding{stubFinding(capsule.ChangesRequested, 2)},
		},
		{
			name: "rejected is terminal",
			doc: func(d capsuletest.Doc) capsuletest.Doc {
				return d.Stub(map[string]any{"reviews": []string{"REJECTED"}})
			},
			wantAction: phases.Halt, wantHalt: "review_rejected_terminal", wantVerdict: capsule.Rejected,
			wantFindings: []capsule.Finding{stubFinding(capsule.Rejected, 1)},
		},
		{
			// Rule 20 stops such a capsule at AUTOMATED_GATES in the real
			// pipeline; REVIEW still refuses the approval on its own (Rule 15).
			name: "approval by the producer is a rule 15 rejection",
			doc:  func(d capsuletest.Doc) capsuletest.Doc { return d.Set("review.reviewer_agent_id", "agent-coder-1") },
			prepare: func(b *bundle, _ *phases.Input) {
				b.registry.RegisterReviewer("agent-coder-1", executors.StubReviewer{})
			},
			wantAction: phases.Halt, wantHalt: "review_rejected_terminal", wantVerdict: capsule.Rejected,
			wantFindings: []capsule.Finding{rule15},
		},
		{
			name:     "rule 15 judges the artifact's producer",
			doc:      func(d capsuletest.Doc) capsuletest.Doc { return d.Set("review.reviewer_agent_id", "agent-coder-2") },
			producer: "agent-coder-2",
			prepare: func(b *bundle, _ *phases.Input) {
				b.registry.RegisterReviewer("agent-coder-2", executors.StubReviewer{})
			},
			wantAction: phases.Halt, wantHalt: "review_rejected_terminal", wantVerdict: capsule.Rejected,
			wantFindings: []capsule.Finding{{
				Rule: 15, Title: "Reviewer is never the producer", Field: "review.reviewer_agent_id",
				Message: `reviewer "agent-coder-2" is the artifact's producer; approval refused`,
			}},
		},
		{
			name: "budget exceeded by the review",
			doc: func(d capsuletest.Doc) capsuletest.Doc {
				return d.Stub(map[string]any{"review_usage": map[string]any{"tokens": 99999}})
			},
			prepare:    func(b *bundle, _ *phases.Input) { b.budgets.exceeded = capsule.BudgetTokens },
			wantAction: phases.Halt, wantHalt: "budget_exceeded:tokens", wantVerdict: capsule.Approved,
			wantFindings: []capsule.Finding{{
				Rule: 16, Title: "Token and dollar budgets", Field: "budget",
				Message: "used 99999 tokens / $0.0000 against caps 10000 / $5.0000",
			}},
		},
		{
			name: "budget exceeded keeps the reviewer's findings",
			doc: func(d capsuletest.Doc) capsuletest.Doc {
				return d.Stub(map[string]any{"reviews": []string{"REJECTED"}, "review_usage": map[string]any{"dollars": 6}})
			},
			prepare:    func(b *bundle, _ *phases.Input) { b.budgets.exceeded = capsule.BudgetDollars },
			wantAction: phases.Halt, wantHalt: "budget_exceeded:dollars", wantVerdict: capsule.Rejected,
			wantFindings: []capsule.Finding{{
				Rule: 16, Title: "Token and dollar budgets", Field: "budget",
				Message: "used 0 tokens / $6.0000 against caps 10000 / $5.0000",
			}, stubFinding(capsule.Rejected, 1)},
		},
		{
			name: "raised caps are the caps charged against",
			doc: func(d capsuletest.Doc) capsuletest.Doc {
				return d.Stub(map[string]any{"review_usage": map[string]any{"tokens": 12000}})
			},
			prepare: func(_ *bundle, in *phases.Input) {
				in.Checkpoint.State.Overrides = &capsule.Overrides{Tokens: 50000, Dollars: 9}
			},
			wantAction: phases.Advance, wantVerdict: capsule.Approved, wantCaps: capsule.Budget{Tokens: 50000, Dollars: 9},
		},
		{
			name:       "operator gate waits after an approval",
			doc:        func(d capsuletest.Doc) capsuletest.Doc { return d.Set("review.operator_gate", true) },
			prepare:    func(b *bundle, _ *phases.Input) { b.env.BudgetWarning = 0.0001 },
			wantAction: phases.Advance, wantVerdict: capsule.Approved, wantWait: true,
		},
		{
			name: "operator gate does not wait on changes requested",
			doc: func(d capsuletest.Doc) capsuletest.Doc {
				return d.Set("review.operator_gate", true).Stub(map[string]any{"reviews": []string{"CHANGES_REQUESTED"}})
			},
			wantAction: phases.LoopBack, wantVerdict: capsule.ChangesRequested,
			wantFindings: []capsule.Finding{stubFinding(capsule.ChangesRequested, 1)},
		},
		{
			name: "budget warning after a loop back",
			doc: func(d capsuletest.Doc) capsuletest.Doc {
				return d.Stub(map[string]any{"reviews": []string{"CHANGES_REQUESTED"}, "review_usage": map[string]any{"tokens": 8000}})
			},
			prepare:    func(b *bundle, _ *phases.Input) { b.env.BudgetWarning = 0.75 },
			wantAction: phases.LoopBack, wantVerdict: capsule.ChangesRequested,
			wantFindings: []capsule.Finding{stubFinding(capsule.ChangesRequested, 1)},
			wantTrigger:  capsule.TriggerBudgetWarning, wantReason: "80% of a budget cap used (8000 tokens, $0.0000 of 10000 tokens, $5.0000)",
		},
		{
			name: "accepted review parks",
			prepare: func(b *bundle, _ *phases.Input) {
				b.registry.RegisterReviewer(executors.StubReviewerID, errorReviewer{err: &executors.AcceptedError{}})
			},
			wantAction: phases.Park, wantTrigger: capsule.TriggerBlockedExternal,
			wantReason: "the reviewer needs time or a human: executors: accepted, result follows on the completion subject",
		},
		{
			name: "artifact gone after the retention halts without running the executor again",
			prepare: func(b *bundle, _ *phases.Input) {
				b.artifacts.getErr = fmt.Errorf("get: %w", phases.ErrArtifactGone)
			},
			wantAction: phases.Halt, wantHalt: "executor_failed:artifact {ref} is gone (kept for the retention after it was written)",
		},
		{
			name: "reviewer transport error",
			prepare: func(b *bundle, _ *phases.Input) {
				b.registry.RegisterReviewer(executors.StubReviewerID, errorReviewer{err: errors.New("no responders")})
			},
			wantAction: phases.Halt, wantHalt: "executor_failed:reviewer: no responders",
		},
		{
			name:       "reviewer failure",
			doc:        func(d capsuletest.Doc) capsuletest.Doc { return d.Stub(map[string]any{"reviews": []string{"MAYBE"}}) },
			wantAction: phases.Halt, wantHalt: `executor_failed:reviewer: metadata.stub.reviews[0]: unknown verdict "MAYBE"`,
		},
		{
			name:       "unknown reviewer",
			doc:        func(d capsuletest.Doc) capsuletest.Doc { return d.Set("review.reviewer_agent_id", "nobody") },
			wantAction: phases.Halt, wantHalt: "executor_failed:no reviewer nobody",
			wantFindings: []capsule.Finding{{Rule: 20, Field: "review.reviewer_agent_id", Message: `executors: no executor or reviewer configured: reviewer "nobody"`}},
		},
		{
			name:       "no artifact for the cycle",
			prepare:    func(_ *bundle, in *phases.Input) { in.Checkpoint.State.Result.Cycle = 2 },
			wantAction: phases.Halt, wantHalt: "executor_failed:no artifact recorded for cycle 1",
		},
		{
			name:       "artifact store failure retries",
			prepare:    func(b *bundle, _ *phases.Input) { b.artifacts.getErr = errors.New("object store down") },
			wantAction: phases.Retry,
		},
		{
			name:       "budget store failure retries",
			prepare:    func(b *bundle, _ *phases.Input) { b.budgets.err = errors.New("kv down") },
			wantAction: phases.Retry,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			doc := newDoc()
			if tt.doc != nil {
				doc = tt.doc(doc)
			}
			cycle := tt.cycle
			if cycle == 0 {
				cycle = 1
			}
			producer := tt.producer
			if producer == "" {
				producer = "agent-coder-1"
			}
			in := reviewInput(t, b, doc.Sealed(t), cycle, producer)
			if tt.prepare != nil {
				tt.prepare(b, in)
			}
			wantHalt := tt.wantHalt
			if r := in.Checkpoint.State.Result; r != nil {
				wantHalt = strings.ReplaceAll(wantHalt, "{ref}", r.ArtifactRef)
			}
			ctx := context.Background()
			if tt.wantAction == phases.Retry {
				// See TestExecutionRun: a delivery retries the writes of a
				// reviewer's result until its claim or time ends.
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
			}
			d := phases.Review{}.Run(ctx, b.env, in)
			require.Equal(t, tt.wantAction, d.Action, "halt %s, err %v", d.Halt, d.Err)
			require.Equal(t, wantHalt, d.Halt.String())
			require.Equal(t, tt.wantWait, d.Wait)
			require.Equal(t, tt.wantTrigger, d.Trigger)
			require.Equal(t, tt.wantReason, d.Reason)
			if tt.wantAction == phases.Retry {
				require.Error(t, d.Err)
				require.Nil(t, d.Record)
				return
			}
			require.Equal(t, tt.wantFindings, d.Findings)
			if tt.wantVerdict == "" {
				if tt.name == "reviewer failure" {
					// A failed call is still charged (Rule 16).
					require.NotNil(t, d.Record)
					require.Len(t, b.budgets.charges, 1)
					return
				}
				require.Nil(t, d.Record)
				require.Empty(t, b.budgets.charges)
				return
			}
			require.Len(t, b.budgets.charges, 1)
			require.Equal(t, fmt.Sprintf("%s/%d/review", doc.ID(), cycle), b.budgets.charges[0].chargeID)
			caps := tt.wantCaps
			if caps == (capsule.Budget{}) {
				caps = capsule.Budget{Tokens: 10000, Dollars: 5}
			}
			require.Equal(t, caps, b.budgets.charges[0].caps)
			st := capsule.CheckpointState{}
			d.Record.ApplyTo(&st)
			d.Record.ApplyTo(&st)
			require.Len(t, st.Reviews, 1, "a review is recorded once per cycle")
			rv := st.Reviews[0]
			require.Equal(t, cycle, rv.Cycle)
			require.Equal(t, in.Capsule.Review.ReviewerAgentID, rv.ReviewerID)
			require.Equal(t, tt.wantVerdict, rv.Verdict)
			require.Equal(t, now, rv.At)
		})
	}
}

func TestAutomatedGatesAndHandoff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.env.Rules.ReviewerIDs = []string{"agent-coder-1"}
	raw := newDoc().Set("review.reviewer_agent_id", "agent-coder-1").Set("review.max_cycles", 4).Sealed(t)
	in := &phases.Input{Capsule: decode(t, raw), Raw: raw}
	d := phases.AutomatedGates{}.Run(context.Background(), b.env, in)
	require.Equal(t, phases.Halt, d.Action)
	require.Equal(t, "absolute_rules_violated:[20, 21]", d.Halt.String())
	require.Equal(t, []int{20, 21}, rulesOf(d.Findings))

	require.Equal(t, phases.Advance, phases.Handoff{}.Run(context.Background(), b.env, in).Action)
}

// TestReviewFailureChargesUsage: Rule 16 counts the usage of every executor
// and reviewer call: a failed reviewer call's usage is charged under its
// attempt's id before REVIEW halts, as a failed executor call's is.
func TestReviewFailureChargesUsage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.registry.RegisterReviewer(executors.StubReviewerID, errorReviewer{err: &executors.FailedError{Detail: "model refused", Usage: capsule.Usage{Tokens: 50}}})
	doc := newDoc()
	in := reviewInput(t, b, doc.Sealed(t), 1, "agent-coder-1")
	d := phases.Review{}.Run(context.Background(), b.env, in)
	require.Equal(t, "executor_failed:reviewer: model refused", d.Halt.String())
	require.Equal(t, []charge{{
		capsuleID: doc.ID(), chargeID: doc.ID() + "/1/review",
		caps: capsule.Budget{Tokens: 10000, Dollars: 5}, usage: capsule.Usage{Tokens: 50},
	}}, b.budgets.charges)
	require.NotNil(t, d.Record)
	var st capsule.CheckpointState
	d.Record.ApplyTo(&st)
	require.Equal(t, capsule.Usage{Tokens: 50}, st.BudgetUsed)
}

// TestReceptionParsesOnce: schemas.ValidateDoc on capsule.ParseJSON's tree
// judges every example capsule as schemas.Validate judges its bytes.
func TestReceptionParsesOnce(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../examples/capsules/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		doc, perr := capsule.ParseJSON(raw)
		if perr != nil {
			continue // the lenient path validates the bytes, as before
		}
		byBytes := schemas.Validate(schemas.Capsule, raw)
		byDoc := schemas.ValidateDoc(schemas.Capsule, doc)
		if byBytes == nil {
			require.NoError(t, byDoc, f)
			continue
		}
		require.Error(t, byDoc, f)
		require.Equal(t, byBytes.Error(), byDoc.Error(), f)
	}
}

// Lists over their hard limit halt at RECEPTION, naming the first such list.
func TestReceiveListLimits(t *testing.T) {
	t.Parallel()
	strs := func(n int, f func(i int) string) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	tests := []struct {
		path string
		max  int
		item func(i int) string
	}{
		{"spec.acceptance_criteria", capsule.MaxAcceptanceCriteria, func(i int) string { return fmt.Sprint("criterion ", i) }},
		{"context_refs", capsule.MaxContextRefs, func(i int) string { return fmt.Sprint("file:docs/", i) }},
		{"constraints.resource_locks_required", capsule.MaxResourceLocks, func(i int) string { return fmt.Sprint("docs/", i) }},
		{"constraints.allowed_paths", capsule.MaxAllowedPaths, func(i int) string { return fmt.Sprint("docs/", i) }},
		{"constraints.forbidden_paths", capsule.MaxForbiddenPaths, func(i int) string { return fmt.Sprint("docs/", i) }},
		{"constraints.network.allow_hosts", capsule.MaxAllowHosts, func(i int) string { return fmt.Sprint("h", i, ".example.com") }},
		{"depends_on", capsule.MaxDependsOn, func(int) string { return capsuletest.NewID() }},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			at := newDoc().Set(tt.path, strs(tt.max, tt.item)).Sealed(t)
			r := phases.Receive(context.Background(), b.env, at, func(id string) string { return id })
			require.NotEqual(t, capsule.CodeCapsuleLimitsExceeded, r.Decision.Halt.Code, "%d entries are allowed", tt.max)

			over := newDoc().Set(tt.path, strs(tt.max+1, tt.item)).Sealed(t)
			r = phases.Receive(context.Background(), b.env, over, func(id string) string { return id })
			require.Equal(t, phases.Halt, r.Decision.Action)
			require.Equal(t, "capsule_limits_exceeded:"+tt.path, r.Decision.Halt.String())
			require.Equal(t, []capsule.Finding{{Field: tt.path,
				Message: fmt.Sprintf("%s has %d entries, over the limit of %d", tt.path, tt.max+1, tt.max)}}, r.Decision.Findings)
			require.NotNil(t, r.Capsule, "the capsule was read; only its size is refused")
		})
	}
}

// A capsule whose every list entry breaks the schema halts with a bounded
// reason and bounded findings: the checkpoint must stay one NATS message.
func TestReceiveSchemaFloodIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bad := make([]any, 40_000)
	for i := range bad {
		bad[i] = i // depends_on wants strings
	}
	raw := newDoc().Set("depends_on", bad).Set(strings.Repeat("k", 20_000), 1).Sealed(t)
	require.Less(t, len(raw), phases.DefaultMaxIntakeBytes)
	r := phases.Receive(context.Background(), b.env, raw, func(id string) string { return id })
	require.Equal(t, phases.Halt, r.Decision.Action)
	require.Equal(t, capsule.CodeSchemaInvalid, r.Decision.Halt.Code)
	require.Len(t, r.Decision.Findings, capsule.MaxFindings)
	require.Regexp(t, `^… and [0-9,]+ more findings$`, r.Decision.Findings[capsule.MaxFindings-1].Message)
	require.True(t, strings.HasSuffix(r.Decision.Halt.Detail, " more"), r.Decision.Halt.Detail[:200])
	size := len(r.Decision.Halt.String())
	for _, f := range r.Decision.Findings {
		size += len(f.Field) + len(f.Message) + len(f.Title)
	}
	require.Less(t, size, 256<<10, "halt reason and findings of a flood stay far below NATS's 1 MiB")
}

// RECEPTION keys a capsule by its canonical id: an upper-case UUID is the
// lower-case one, and its dependencies are canonical too.
func TestReceiveCanonicalID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, dep := capsuletest.NewID(), "01hzy8j6q4w3v0d7t1n9k2m5pc"
	raw := newDoc().Set("capsule_id", strings.ToUpper(id)).Set("depends_on", []any{dep}).Sealed(t)
	var holders []string
	r := phases.Receive(context.Background(), b.env, raw, func(id string) string { holders = append(holders, id); return id })
	require.Equal(t, phases.Advance, r.Decision.Action, "%s %v", r.Decision.Halt, r.Decision.Findings)
	require.Equal(t, id, r.Capsule.CapsuleID)
	require.Equal(t, []string{"01HZY8J6Q4W3V0D7T1N9K2M5PC"}, r.Capsule.DependsOn)
	require.Equal(t, []string{id}, holders, "locks are checked for the canonical key")
	require.Equal(t, strings.ToUpper(id), r.ClaimedID, "the bytes' claim is reported as written")
	want, err := capsule.Digest(raw)
	require.NoError(t, err)
	require.Equal(t, want, r.Digest, "the digest is the bytes' own")
}
