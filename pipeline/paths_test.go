package pipeline_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/budget"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/store"
)

// TestPaths drives every scripted path of the saga through a real pipeline
// and checks the exact halt reason, cycles used and executor runs.
func TestPaths(t *testing.T) {
	t.Parallel()
	f := setup(t)
	type tc struct {
		name     string
		doc      func() capsuletest.Doc
		state    capsule.State
		reason   string
		cycles   int
		outcomes []string
	}
	b := func() capsuletest.Doc { return f.own(t, capsuletest.New()) }
	cases := []tc{
		{
			name: "changes requested then approved",
			doc: func() capsuletest.Doc {
				return b().Stub(map[string]any{"reviews": []any{"CHANGES_REQUESTED", "APPROVED"}})
			},
			state:  capsule.Completed,
			cycles: 2,
			outcomes: []string{"RECEPTION/passed", "REALITY_ANCHOR/passed", "PLANNING/passed", "AUTOMATED_GATES/passed",
				"EXECUTION/passed", "REVIEW/looped_back", "EXECUTION/passed", "REVIEW/passed", "HANDOFF/completed"},
		},
		{
			name: "three changes requested exceed the cycles",
			doc: func() capsuletest.Doc {
				return b().Stub(map[string]any{"reviews": []any{"CHANGES_REQUESTED", "CHANGES_REQUESTED", "CHANGES_REQUESTED"}})
			},
			state: capsule.Halted, reason: "max_cycles_exceeded:3", cycles: 3,
		},
		{
			name:  "rejected halts at once",
			doc:   func() capsuletest.Doc { return b().Stub(map[string]any{"reviews": []any{"REJECTED"}}) },
			state: capsule.Halted, reason: "review_rejected_terminal", cycles: 1,
		},
		{
			name:  "executor failure",
			doc:   func() capsuletest.Doc { return b().Stub(map[string]any{"fail": "model refused"}) },
			state: capsule.Halted, reason: "executor_failed:model refused", cycles: 1,
		},
		{
			name: "token budget exceeded",
			doc: func() capsuletest.Doc {
				return b().Stub(map[string]any{"usage": map[string]any{"tokens": 20000, "dollars": 0.1}})
			},
			state: capsule.Halted, reason: "budget_exceeded:tokens", cycles: 1,
		},
		{
			name: "dollar budget exceeded",
			doc: func() capsuletest.Doc {
				return b().Stub(map[string]any{"usage": map[string]any{"tokens": 10, "dollars": 9.5}})
			},
			state: capsule.Halted, reason: "budget_exceeded:dollars", cycles: 1,
		},
		{
			name:  "context ref missing",
			doc:   func() capsuletest.Doc { return b().Set("context_refs", []any{"file:go.mod", "file:nope.txt"}) },
			state: capsule.Halted, reason: "context_ref_missing:file:nope.txt",
		},
		{
			name:  "context ref escaping the workspace",
			doc:   func() capsuletest.Doc { return b().Set("context_refs", []any{"file:../../etc/passwd"}) },
			state: capsule.Halted, reason: "context_ref_missing:file:../../etc/passwd",
		},
		{
			name:  "target missing",
			doc:   func() capsuletest.Doc { return b().Set("target", "kv:NOPE/key") },
			state: capsule.Halted, reason: "target_missing:kv:NOPE/key",
		},
		{
			name: "spec not approved",
			doc: func() capsuletest.Doc {
				return b().Set("spec", map[string]any{"approved": false, "acceptance_criteria": []any{"x"}})
			},
			state: capsule.Halted, reason: "spec_not_approved:[approved, approved_by, approved_at, problem_statement, definition_of_done]",
		},
		{
			name: "absolute rules",
			doc: func() capsuletest.Doc {
				return b().Set("spec.approved_by", "agent-coder-1").Set("constraints.destructive", true)
			},
			state: capsule.Halted, reason: "absolute_rules_violated:[4, 11]",
		},
		{
			name: "deadline in past",
			doc: func() capsuletest.Doc {
				return b().Set("deadline", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
			},
			state: capsule.Halted, reason: "deadline_in_past",
		},
		{
			name:  "budget tokens non positive",
			doc:   func() capsuletest.Doc { return b().Set("budget.tokens", 0) },
			state: capsule.Halted, reason: "budget_tokens_non_positive",
		},
		{
			name:  "schema invalid",
			doc:   func() capsuletest.Doc { return b().Delete("target").Set("budget.tokens", "many") },
			state: capsule.Halted, reason: "schema_invalid:/budget/tokens,/target",
		},
		{
			name:  "unsupported version",
			doc:   func() capsuletest.Doc { return b().Set("schema_version", "2.0") },
			state: capsule.Halted, reason: "unsupported_schema_version:2.0",
		},
	}
	ids := make([]string, len(cases))
	for i, c := range cases {
		d := c.doc()
		ids[i] = d.ID()
		f.publish(t, d.Sealed(t))
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := f.wait(t, ids[i])
			require.Equal(t, c.state, s.State)
			require.Equal(t, c.reason, s.HaltReason)
			require.Equal(t, c.cycles, s.CyclesUsed)
			if c.outcomes != nil {
				require.Equal(t, c.outcomes, outcomes(s.History))
			}
		})
	}
}

func TestIntegrityMismatch(t *testing.T) {
	t.Parallel()
	f := setup(t)
	doc := capsuletest.New()
	raw := strings.Replace(string(doc.Sealed(t)), "Touch the README", "Touch the README!", 1)
	f.publish(t, []byte(raw))
	s := f.wait(t, doc.ID())
	require.Equal(t, "integrity_mismatch", s.HaltReason)
}

func TestLockUnavailableAtReception(t *testing.T) {
	t.Parallel()
	f := setup(t)
	// A capsule parked in EXECUTION holds README.md; a second one wanting it
	// at reception is refused.
	t.Cleanup(func() { close(f.gate) })
	first := capsuletest.New().Set("task.kind", "slow")
	f.publish(t, first.Sealed(t))
	eventuallyExecuted(t, f, 1)
	second := capsuletest.New()
	f.publish(t, second.Sealed(t))
	s := f.wait(t, second.ID())
	require.Equal(t, "lock_unavailable:README.md", s.HaltReason)
}

func eventuallyExecuted(t *testing.T, f *fixture, n int64) {
	t.Helper()
	f.bundle.EventuallyExecuted(t, n)
}

// TestBadInputIsKept: bytes that are no capsule end halted with a specific
// reason, are listed, and their original bytes are on the outcome stream.
func TestBadInputIsKept(t *testing.T) {
	t.Parallel()
	f := setup(t)
	cases := map[string]string{
		"not json":  "this is not json",
		"array":     `[1,2,3]`,
		"oversized": `{"x":"` + strings.Repeat("a", 600*1024) + `"}`,
		"truncated": `{"capsule_id": "abc"`,
	}
	want := map[string]string{
		"not json":  "not_json",
		"array":     "not_json",
		"oversized": "capsule_too_large:",
		"truncated": "not_json",
	}
	keys := map[string]string{}
	for name, body := range cases {
		seq, err := f.client.Publish(context.Background(), []byte(body), "")
		require.NoError(t, err, name)
		keys[name] = "x-" + strconv.FormatUint(seq, 10)
	}
	var halted []client.Status
	require.Eventually(t, func() bool {
		var err error
		halted, err = f.client.List(context.Background(), capsule.Halted)
		return err == nil && len(halted) == len(cases)
	}, 20*time.Second, 20*time.Millisecond)
	reasons := map[string]string{}
	for _, s := range halted {
		require.True(t, strings.HasPrefix(s.Key, "x-"), s.Key)
		reasons[s.Key] = s.HaltReason
	}
	for name, r := range want {
		// Each input halts with its own reason, under the key of its intake sequence.
		got := reasons[keys[name]]
		require.True(t, strings.HasPrefix(got, r), "%s (%s): want a halt starting with %q, got %q", name, keys[name], r, got)
	}

	// The original bytes are kept on the outcome stream (published once
	// each halt is recorded).
	requireOutcomes(t, f, uint64(len(cases)))
	str, err := f.js.Stream(context.Background(), store.OutcomesStream)
	require.NoError(t, err)
	info, err := str.Info(context.Background())
	require.NoError(t, err)
	seen := map[string]bool{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := str.GetMsg(context.Background(), seq)
		require.NoError(t, err)
		seen[string(m.Data)] = true
	}
	for name, body := range cases {
		require.True(t, seen[body], "%s: original bytes not kept", name)
	}
}

// TestWaveBudget: capsules of one wave share its budget (in KV, atomically);
// the charge that crosses the wave's cap halts budget_exceeded:wave_tokens.
func TestWaveBudget(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	bt, err := budget.New(ctx, f.js, budget.Config{})
	require.NoError(t, err)
	require.NoError(t, bt.SetWave(ctx, "wave-a", 3000, 0, false))
	a := f.admin(t)
	// Both pass AUTOMATED_GATES (each reserves its 1,200 tokens of the
	// 3,000) before either runs its executor; the cap is then lowered
	// below what they reserved, so their charges cross it.
	require.NoError(t, a.PausePhase(ctx, capsule.Execution))
	usage := map[string]any{"usage": map[string]any{"tokens": 800, "dollars": 0.01}}
	var ids []string
	for i := 0; i < 2; i++ {
		d := f.own(t, capsuletest.New().Set("wave_id", "wave-a").Set("budget.tokens", 1200).Stub(usage))
		ids = append(ids, d.ID())
		f.publish(t, d.Sealed(t))
	}
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		for _, id := range ids {
			s, err := f.client.Status(ctx, id)
			if err != nil || s.Phase != int(capsule.Execution) {
				return false
			}
		}
		return true
	}, "both queued at EXECUTION")
	require.NoError(t, bt.SetWave(ctx, "wave-a", 1500, 0, false))
	require.NoError(t, a.ResumePhase(ctx, capsule.Execution))
	var reasons []string
	for _, id := range ids {
		s := f.wait(t, id)
		reasons = append(reasons, string(s.State)+" "+s.HaltReason)
	}
	require.ElementsMatch(t, []string{"completed ", "halted budget_exceeded:wave_tokens"}, reasons)
	w, ok, err := bt.Wave(ctx, "wave-a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(1600), w.Used.Tokens)
}
