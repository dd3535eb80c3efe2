package executors_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
)

// withMetadata is a capsule whose metadata is the given JSON ("" for none).
func withMetadata(t *testing.T, metadata string) *capsule.Capsule {
	t.Helper()
	c := &capsule.Capsule{
		CapsuleID: "0190a8f2-6c1e-7b7a-9a39-7c1f5b2c9e01",
		Task:      capsule.Task{Kind: executors.StubKind, Title: "Touch the README"},
		Target:    "file:README.md",
	}
	if metadata != "" {
		require.True(t, json.Valid([]byte(metadata)), "bad test metadata %s", metadata)
		c.Metadata = json.RawMessage(metadata)
	}
	return c
}

func TestStubExecute(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		metadata  string
		wantUsage capsule.Usage
		// wantFail is the FailedError detail; "" when the stub succeeds.
		wantFail string
	}{
		{name: "no metadata", wantUsage: capsule.Usage{Tokens: 1000, Dollars: 0.01}},
		{name: "metadata without stub", metadata: `{"owner":"team-a"}`, wantUsage: capsule.Usage{Tokens: 1000, Dollars: 0.01}},
		{name: "empty script", metadata: `{"stub":{}}`, wantUsage: capsule.Usage{Tokens: 1000, Dollars: 0.01}},
		{name: "scripted usage", metadata: `{"stub":{"usage":{"tokens":1200,"dollars":0.02}}}`, wantUsage: capsule.Usage{Tokens: 1200, Dollars: 0.02}},
		{name: "scripted zero usage", metadata: `{"stub":{"usage":{"tokens":0,"dollars":0}}}`, wantUsage: capsule.Usage{}},
		{name: "review usage is not executor usage", metadata: `{"stub":{"review_usage":{"tokens":5}}}`, wantUsage: capsule.Usage{Tokens: 1000, Dollars: 0.01}},
		{name: "fail false", metadata: `{"stub":{"fail":false}}`, wantUsage: capsule.Usage{Tokens: 1000, Dollars: 0.01}},
		{name: "fail null", metadata: `{"stub":{"fail":null}}`, wantUsage: capsule.Usage{Tokens: 1000, Dollars: 0.01}},
		{name: "fail true", metadata: `{"stub":{"fail":true}}`, wantUsage: capsule.Usage{Tokens: 1000, Dollars: 0.01}, wantFail: "stub failure requested"},
		{name: "fail with a message", metadata: `{"stub":{"fail":"model refused"}}`, wantUsage: capsule.Usage{Tokens: 1000, Dollars: 0.01}, wantFail: "model refused"},
		{
			name: "failure still reports scripted usage", metadata: `{"stub":{"fail":"out of memory","usage":{"tokens":7,"dollars":0.5}}}`,
			wantUsage: capsule.Usage{Tokens: 7, Dollars: 0.5}, wantFail: "out of memory",
		},
		{name: "fail with a number", metadata: `{"stub":{"fail":1}}`, wantUsage: capsule.Usage{Tokens: 1000, Dollars: 0.01}, wantFail: "stub failure requested"},
		{
			name: "invalid verdict in the script", metadata: `{"stub":{"reviews":["APPROVED","MAYBE"]}}`,
			wantFail: `metadata.stub.reviews[1]: unknown verdict "MAYBE"`,
		},
		{
			name: "lower-case verdict is invalid", metadata: `{"stub":{"reviews":["approved"]}}`,
			wantFail: `metadata.stub.reviews[0]: unknown verdict "approved"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := executors.Request{Capsule: withMetadata(t, tt.metadata), Cycle: 2, IdempotencyKey: "0190a8f2-6c1e-7b7a-9a39-7c1f5b2c9e01/2"}
			res, err := executors.Stub{}.Execute(context.Background(), req)
			if tt.wantFail != "" {
				var failed *executors.FailedError
				require.ErrorAs(t, err, &failed)
				require.Equal(t, tt.wantFail, failed.Detail)
				require.Equal(t, tt.wantUsage, failed.Usage)
				require.Equal(t, "executor failed: "+tt.wantFail, err.Error())
				require.Equal(t, executors.Result{}, res)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantUsage, res.Usage)
			require.Equal(t, "application/json", res.MediaType)
			require.JSONEq(t, `{
				"summary": "stub artifact for Touch the README",
				"cycle": 2,
				"target": "file:README.md",
				"idempotency_key": "0190a8f2-6c1e-7b7a-9a39-7c1f5b2c9e01/2"
			}`, string(res.Content))
		})
	}
}

// A capsule cannot script its stub into giving budget back.
func TestStubInvalidUsage(t *testing.T) {
	t.Parallel()
	for metadata, want := range map[string]string{
		`{"stub":{"usage":{"tokens":-1000}}}`:                 "metadata.stub.usage: invalid usage: -1000 tokens / 0 dollars: tokens must not be negative",
		`{"stub":{"usage":{"tokens":1,"dollars":-5}}}`:        "metadata.stub.usage: invalid usage: 1 tokens / -5 dollars: dollars must not be negative",
		`{"stub":{"fail":true,"usage":{"tokens":-1}}}`:        "metadata.stub.usage: invalid usage: -1 tokens / 0 dollars: tokens must not be negative",
		`{"stub":{"review_usage":{"tokens":0,"dollars":-1}}}`: "metadata.stub.review_usage: invalid usage: 0 tokens / -1 dollars: dollars must not be negative",
	} {
		t.Run(metadata, func(t *testing.T) {
			t.Parallel()
			c := withMetadata(t, metadata)
			res, err := executors.Stub{}.Execute(context.Background(), executors.Request{Capsule: c, Cycle: 1})
			var failed *executors.FailedError
			require.ErrorAs(t, err, &failed)
			require.Equal(t, want, failed.Detail)
			require.Zero(t, failed.Usage)
			require.Zero(t, res.Usage)

			rr, err := executors.StubReviewer{}.Review(context.Background(), executors.ReviewRequest{Capsule: c, Cycle: 1})
			require.ErrorAs(t, err, &failed)
			require.Equal(t, want, failed.Detail)
			require.Zero(t, rr.Usage)
		})
	}
}

func TestStubMalformedScript(t *testing.T) {
	t.Parallel()
	for _, metadata := range []string{`{"stub":"approve everything"}`, `{"stub":{"reviews":"APPROVED"}}`, `{"stub":{"usage":{"tokens":"many"}}}`} {
		t.Run(metadata, func(t *testing.T) {
			t.Parallel()
			c := withMetadata(t, metadata)
			_, err := executors.Stub{}.Execute(context.Background(), executors.Request{Capsule: c, Cycle: 1})
			var failed *executors.FailedError
			require.ErrorAs(t, err, &failed)
			require.Regexp(t, `^metadata\.stub: json: cannot unmarshal `, failed.Detail)
			require.Equal(t, capsule.Usage{}, failed.Usage)

			_, err = executors.StubReviewer{}.Review(context.Background(), executors.ReviewRequest{Capsule: c, Cycle: 1})
			require.ErrorAs(t, err, &failed)
			require.Regexp(t, `^metadata\.stub: json: cannot unmarshal `, failed.Detail)
		})
	}
}

func TestStubReviewer(t *testing.T) {
	t.Parallel()
	finding := func(v capsule.Verdict, cycle int) []capsule.Finding {
		return []capsule.Finding{{Message: fmt.Sprintf("stub reviewer: %s on cycle %d", v, cycle)}}
	}
	tests := []struct {
		name     string
		metadata string
		cycle    int
		want     executors.ReviewResult
		wantFail string
	}{
		{name: "no script approves", cycle: 1, want: executors.ReviewResult{Verdict: capsule.Approved}},
		{name: "empty reviews approve", metadata: `{"stub":{"reviews":[]}}`, cycle: 1, want: executors.ReviewResult{Verdict: capsule.Approved}},
		{
			name: "cycle 1 gets the first verdict", metadata: `{"stub":{"reviews":["CHANGES_REQUESTED","REJECTED"]}}`, cycle: 1,
			want: executors.ReviewResult{Verdict: capsule.ChangesRequested, Findings: finding(capsule.ChangesRequested, 1)},
		},
		{
			name: "cycle 2 gets the second verdict", metadata: `{"stub":{"reviews":["CHANGES_REQUESTED","REJECTED"]}}`, cycle: 2,
			want: executors.ReviewResult{Verdict: capsule.Rejected, Findings: finding(capsule.Rejected, 2)},
		},
		{
			name: "cycles past the script approve", metadata: `{"stub":{"reviews":["CHANGES_REQUESTED","REJECTED"]}}`, cycle: 3,
			want: executors.ReviewResult{Verdict: capsule.Approved},
		},
		{
			name: "scripted approval has no findings", metadata: `{"stub":{"reviews":["APPROVED"]}}`, cycle: 1,
			want: executors.ReviewResult{Verdict: capsule.Approved},
		},
		{name: "cycle 0 approves", metadata: `{"stub":{"reviews":["REJECTED"]}}`, cycle: 0, want: executors.ReviewResult{Verdict: capsule.Approved}},
		{
			name: "review usage is reported", metadata: `{"stub":{"reviews":["CHANGES_REQUESTED"],"review_usage":{"tokens":10,"dollars":0.25}}}`, cycle: 1,
			want: executors.ReviewResult{Verdict: capsule.ChangesRequested, Findings: finding(capsule.ChangesRequested, 1), Usage: capsule.Usage{Tokens: 10, Dollars: 0.25}},
		},
		{name: "executor usage is not review usage", metadata: `{"stub":{"usage":{"tokens":10}}}`, cycle: 1, want: executors.ReviewResult{Verdict: capsule.Approved}},
		{name: "executor failure does not fail the review", metadata: `{"stub":{"fail":true}}`, cycle: 1, want: executors.ReviewResult{Verdict: capsule.Approved}},
		{
			name: "invalid verdict fails the review", metadata: `{"stub":{"reviews":["APPROVED","LGTM"]}}`, cycle: 1,
			wantFail: `metadata.stub.reviews[1]: unknown verdict "LGTM"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, err := executors.StubReviewer{}.Review(context.Background(), executors.ReviewRequest{Capsule: withMetadata(t, tt.metadata), Cycle: tt.cycle})
			if tt.wantFail != "" {
				var failed *executors.FailedError
				require.ErrorAs(t, err, &failed)
				require.Equal(t, tt.wantFail, failed.Detail)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, res)
		})
	}
}

func TestParseStubScript(t *testing.T) {
	t.Parallel()
	s, err := executors.ParseStubScript(withMetadata(t, `{"stub":{"reviews":["CHANGES_REQUESTED","APPROVED"],"usage":{"tokens":3,"dollars":1.5},"fail":"no"}}`))
	require.NoError(t, err)
	require.Equal(t, []capsule.Verdict{capsule.ChangesRequested, capsule.Approved}, s.Reviews)
	require.Equal(t, &capsule.Usage{Tokens: 3, Dollars: 1.5}, s.Usage)
	require.Nil(t, s.ReviewUsage)
	require.JSONEq(t, `"no"`, string(s.Fail))

	s, err = executors.ParseStubScript(withMetadata(t, ""))
	require.NoError(t, err)
	require.Equal(t, executors.StubScript{}, s)

	_, err = executors.ParseStubScript(withMetadata(t, `{"stub":{"reviews":["REJECTED","NOPE"]}}`))
	require.EqualError(t, err, `metadata.stub.reviews[1]: unknown verdict "NOPE"`)
}

// namedExecutor and namedReviewer tell registry entries apart.
type namedExecutor string

func (n namedExecutor) Execute(context.Context, executors.Request) (executors.Result, error) {
	return executors.Result{MediaType: string(n)}, nil
}

type namedReviewer string

func (n namedReviewer) Review(context.Context, executors.ReviewRequest) (executors.ReviewResult, error) {
	return executors.ReviewResult{Findings: []capsule.Finding{{Message: string(n)}}}, nil
}

func TestRegistry(t *testing.T) {
	t.Parallel()

	t.Run("built-in stubs", func(t *testing.T) {
		t.Parallel()
		r := executors.NewRegistry()
		require.Equal(t, []string{"stub"}, r.Kinds())
		require.Equal(t, []string{"stub-reviewer"}, r.ReviewerIDs())
		e, err := r.Executor(executors.StubKind)
		require.NoError(t, err)
		require.Equal(t, executors.Stub{}, e)
		rv, err := r.Reviewer(executors.StubReviewerID)
		require.NoError(t, err)
		require.Equal(t, executors.StubReviewer{}, rv)
	})

	lookups := []struct {
		name    string
		lookup  func(*executors.Registry) error
		wantErr string
	}{
		{
			name:    "unknown kind",
			lookup:  func(r *executors.Registry) error { _, err := r.Executor("poetry"); return err },
			wantErr: `executors: no executor or reviewer configured: task.kind "poetry"`,
		},
		{
			name:    "kinds are case-sensitive",
			lookup:  func(r *executors.Registry) error { _, err := r.Executor("Stub"); return err },
			wantErr: `executors: no executor or reviewer configured: task.kind "Stub"`,
		},
		{
			name:    "unknown reviewer",
			lookup:  func(r *executors.Registry) error { _, err := r.Reviewer("agent-reviewer-9"); return err },
			wantErr: `executors: no executor or reviewer configured: reviewer "agent-reviewer-9"`,
		},
		{
			name:    "a kind is not a reviewer",
			lookup:  func(r *executors.Registry) error { _, err := r.Reviewer(executors.StubKind); return err },
			wantErr: `executors: no executor or reviewer configured: reviewer "stub"`,
		},
		{
			name:    "a reviewer is not a kind",
			lookup:  func(r *executors.Registry) error { _, err := r.Executor(executors.StubReviewerID); return err },
			wantErr: `executors: no executor or reviewer configured: task.kind "stub-reviewer"`,
		},
	}
	for _, tt := range lookups {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.lookup(executors.NewRegistry())
			require.ErrorIs(t, err, executors.ErrUnknownKind)
			require.EqualError(t, err, tt.wantErr)
		})
	}

	t.Run("register, replace and list sorted", func(t *testing.T) {
		t.Parallel()
		r := executors.NewRegistry()
		r.RegisterExecutor("zeta", namedExecutor("zeta"))
		r.RegisterExecutor("alpha", namedExecutor("alpha"))
		r.RegisterExecutor("stub", namedExecutor("replaced"))
		r.RegisterReviewer("agent-reviewer-1", namedReviewer("one"))
		require.Equal(t, []string{"alpha", "stub", "zeta"}, r.Kinds())
		require.Equal(t, []string{"agent-reviewer-1", "stub-reviewer"}, r.ReviewerIDs())

		e, err := r.Executor("stub")
		require.NoError(t, err)
		require.Equal(t, namedExecutor("replaced"), e)
		rv, err := r.Reviewer("agent-reviewer-1")
		require.NoError(t, err)
		require.Equal(t, namedReviewer("one"), rv)
		rv, err = r.Reviewer(executors.StubReviewerID)
		require.NoError(t, err)
		require.Equal(t, executors.StubReviewer{}, rv, "other entries are untouched")
	})

	t.Run("registries do not share entries", func(t *testing.T) {
		t.Parallel()
		a, b := executors.NewRegistry(), executors.NewRegistry()
		a.RegisterExecutor("only-a", namedExecutor("a"))
		require.Equal(t, []string{"only-a", "stub"}, a.Kinds())
		require.Equal(t, []string{"stub"}, b.Kinds())
	})

	t.Run("kinds is a copy", func(t *testing.T) {
		t.Parallel()
		r := executors.NewRegistry()
		k := r.Kinds()
		k[0] = "mutated"
		require.Equal(t, []string{"stub"}, r.Kinds())
	})

	t.Run("concurrent use", func(t *testing.T) {
		t.Parallel()
		r := executors.NewRegistry()
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				kind := fmt.Sprintf("kind-%d", i)
				r.RegisterExecutor(kind, namedExecutor(kind))
				r.RegisterReviewer(kind, namedReviewer(kind))
				_, _ = r.Executor(executors.StubKind)
				_, _ = r.Reviewer(kind)
				_ = r.Kinds()
			}()
		}
		wg.Wait()
		require.Len(t, r.Kinds(), 9)
		for i := range 8 {
			kind := fmt.Sprintf("kind-%d", i)
			e, err := r.Executor(kind)
			require.NoError(t, err)
			require.Equal(t, namedExecutor(kind), e)
		}
	})
}

func TestFailedError(t *testing.T) {
	t.Parallel()
	var err error = fmt.Errorf("execute: %w", &executors.FailedError{Detail: "quota", Usage: capsule.Usage{Tokens: 4}})
	var failed *executors.FailedError
	require.True(t, errors.As(err, &failed))
	require.Equal(t, "quota", failed.Detail)
	require.Equal(t, capsule.Usage{Tokens: 4}, failed.Usage)
	require.EqualError(t, err, "execute: executor failed: quota")
	require.NotErrorIs(t, err, executors.ErrUnknownKind)
}
