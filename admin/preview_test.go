package admin_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
)

// TestPreviewReplay: a preview answers what the replay would meet and
// changes nothing; the replay then does what it said.
func TestPreviewReplay(t *testing.T) {
	t.Parallel()
	f, fl := setupReplay(t, nil)
	ctx := context.Background()
	a := f.Pipeline.Admin() // the phases' environment: resolver, rules, executors
	missing := capsuletest.New().Set("target", "file:missing-"+capsuletest.NewID()+".txt")
	f.Publish(t, missing.Sealed(t))
	require.Equal(t, capsule.Halted, f.Wait(t, missing.ID()).State)
	failed := f.Own(t, capsuletest.New().Set("task.kind", "flaky"))
	f.Publish(t, failed.Sealed(t))
	require.Equal(t, capsule.Halted, f.Wait(t, failed.ID()).State)
	spent := f.Own(t, capsuletest.New().Set("task.kind", "flaky").Set("budget.tokens", 5))
	f.Publish(t, spent.Sealed(t))
	require.Equal(t, capsule.Halted, f.Wait(t, spent.ID()).State)
	before := map[string]*capsule.Checkpoint{}
	for _, id := range []string{missing.ID(), failed.ID(), spent.ID()} {
		cp, err := f.Client.Checkpoint(ctx, id)
		require.NoError(t, err)
		before[id] = cp
	}
	fixedDoc := f.Own(t, capsuletest.Doc(clone(t, missing)))
	fixed := fixedDoc.Sealed(t)
	review := capsule.ReviewPhase
	for _, tc := range []struct {
		name      string
		id        string
		opts      admin.ReplayOptions
		wouldHalt string // "" for none
		from      capsule.Phase
		calls     []string // phase/agent/work
		locks     []admin.LockPreview
	}{
		{"the cause is still there", missing.ID(), admin.ReplayOptions{}, "target_missing:" + missing["target"].(string), capsule.RealityAnchor, nil, nil},
		{"corrected", missing.ID(), admin.ReplayOptions{Capsule: fixed}, "", capsule.Reception,
			[]string{"EXECUTION/stub/repeated", "REVIEW/stub-reviewer/repeated"},
			[]admin.LockPreview{{Path: fixedDoc["constraints"].(map[string]any)["resource_locks_required"].([]any)[0].(string), Available: true}}},
		{"corrected bytes RECEPTION halts", missing.ID(), admin.ReplayOptions{Capsule: missing.Unsealed(t)}, "schema_invalid:/integrity", capsule.Reception, nil, nil},
		{"the executor again", failed.ID(), admin.ReplayOptions{}, "", capsule.Execution,
			[]string{"EXECUTION/flaky/repeated", "REVIEW/stub-reviewer/repeated"},
			[]admin.LockPreview{{Path: "own-" + failed.ID() + ".txt", Available: true}}},
		{"the budget is spent", spent.ID(), admin.ReplayOptions{}, "budget_exceeded:tokens", capsule.Execution,
			[]string{"EXECUTION/flaky/repeated", "REVIEW/stub-reviewer/repeated"},
			[]admin.LockPreview{{Path: "own-" + spent.ID() + ".txt", Available: true}}},
	} {
		p, err := a.PreviewReplay(ctx, tc.id, tc.opts)
		require.NoError(t, err, tc.name)
		if tc.wouldHalt == "" {
			require.Nil(t, p.WouldHalt, tc.name)
		} else {
			require.NotNil(t, p.WouldHalt, tc.name)
			require.Contains(t, *p.WouldHalt, tc.wouldHalt, tc.name)
			require.NotEmpty(t, p.Findings, tc.name)
		}
		require.Equal(t, 2, p.Run, tc.name)
		require.Equal(t, tc.from, p.From, tc.name)
		var calls []string
		for _, c := range p.AgentCalls {
			calls = append(calls, c.PhaseName+"/"+c.Agent+"/"+c.Work)
			require.Equal(t, p.Cycle, c.Cycle)
		}
		require.Equal(t, tc.calls, calls, tc.name)
		if tc.locks == nil {
			tc.locks = []admin.LockPreview{}
		}
		require.Equal(t, tc.locks, p.Locks, tc.name)
	}
	_, err := a.PreviewReplay(ctx, failed.ID(), admin.ReplayOptions{From: &review})
	require.ErrorIs(t, err, admin.ErrRefused, "what replay refuses, the preview refuses")
	moved := f.Own(t, capsuletest.Doc(clone(t, missing))).Set("parent_capsule_id", failed.ID())
	_, err = a.PreviewReplay(ctx, missing.ID(), admin.ReplayOptions{Capsule: moved.Sealed(t)})
	require.ErrorIs(t, err, admin.ErrRefused)
	require.Contains(t, err.Error(), "parent_capsule_id")
	for id, cp := range before {
		now, err := f.Client.Checkpoint(ctx, id)
		require.NoError(t, err)
		require.Equal(t, cp, now, "a preview changes nothing")
	}
	f.RequireOutcomes(t, 3)

	// The replay does what the preview said.
	fl.down.Store(false)
	_, err = a.Replay(ctx, failed.ID(), admin.ReplayOptions{By: "op"})
	require.NoError(t, err)
	require.Equal(t, capsule.Completed, f.Wait(t, failed.ID()).State)
	_, err = a.Replay(ctx, spent.ID(), admin.ReplayOptions{By: "op"})
	require.NoError(t, err)
	s := f.Wait(t, spent.ID())
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, "budget_exceeded:tokens", s.HaltReason)
}
