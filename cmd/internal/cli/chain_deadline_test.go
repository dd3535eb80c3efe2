package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
)

// twoStepChain is a chain produce → translate whose steps change takes
// as it likes (step index, step document).
func twoStepChain(t *testing.T, workspace, chainID string, change func(i int, d capsuletest.Doc)) []byte {
	t.Helper()
	var steps []any
	for i, kind := range []string{"produce", "translate"} {
		name := chainID + "-" + kind + ".txt"
		require.NoError(t, os.WriteFile(filepath.Join(workspace, name), []byte("x"), 0o644))
		d := capsuletest.New().Delete("capsule_id").Set("task.kind", kind).
			Set("task.title", "step "+kind).Set("target", "file:"+name).
			Set("constraints.resource_locks_required", []any{name})
		change(i, d)
		steps = append(steps, map[string]any(d))
	}
	b, err := json.Marshal(map[string]any{"chain_id": chainID, "steps": steps})
	require.NoError(t, err)
	return b
}

// publishChain publishes doc with sagactl publish --chain and returns its
// steps' capsule ids.
func publishChain(t *testing.T, o *online, doc []byte) []string {
	t.Helper()
	r := o.run(t, "publish", "--chain", file(t, doc), "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var pub struct {
		Steps []struct {
			CapsuleID string `json:"capsule_id"`
		} `json:"steps"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &pub))
	ids := make([]string, len(pub.Steps))
	for i, s := range pub.Steps {
		ids[i] = s.CapsuleID
	}
	return ids
}

func statusOf(t *testing.T, o *online, id string) client.Status {
	t.Helper()
	r := o.run(t, "status", id, "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var s client.Status
	require.NoError(t, json.Unmarshal([]byte(r.out), &s))
	return s
}

// TestOnlineChainAcceptOverChangesRequested: with operator_gate "all", a
// step whose review asked for changes waits for the operator; sagactl
// decide accept makes that cycle's artifact the step's final one, and the
// next step runs with it as its context artifact.
func TestOnlineChainAcceptOverChangesRequested(t *testing.T) {
	t.Parallel()
	rec := &recorder{inputs: map[string][]capsule.Artifact{}}
	o := startChainOnline(t, rec)
	ids := publishChain(t, o, twoStepChain(t, o.workspace, "accepted-7", func(i int, d capsuletest.Doc) {
		if i == 0 {
			d.Set("review.operator_gate", "all").Stub(map[string]any{"reviews": []any{"CHANGES_REQUESTED"}})
		}
	}))
	o.waitState(t, ids[0], capsule.WaitingForOperator)

	r := o.run(t, "decide", ids[0], "accept", "--rationale", "good enough", "--by", "dora")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	o.waitState(t, ids[1], capsule.Completed)
	in := rec.inputsOf(ids[1])
	require.Len(t, in, 1, "the next step reads the accepted artifact")
	require.Equal(t, ids[0], in[0].CapsuleID)
	require.Equal(t, 1, in[0].Cycle)
}

// TestOnlineChainStepDeadline: a step's deadline is its own, not its
// publish time: the second step, waiting for the first (which waits for the
// operator), halts deadline_exceeded once its deadline passes, and nothing
// of it runs.
func TestOnlineChainStepDeadline(t *testing.T) {
	t.Parallel()
	rec := &recorder{inputs: map[string][]capsule.Artifact{}}
	o := startChainOnline(t, rec)
	due := time.Now().Add(3 * time.Second).UTC().Format(time.RFC3339)
	ids := publishChain(t, o, twoStepChain(t, o.workspace, "late-8", func(i int, d capsuletest.Doc) {
		if i == 0 {
			d.Set("review.operator_gate", true)
		} else {
			d.Set("deadline", due)
		}
	}))
	o.waitState(t, ids[0], capsule.WaitingForOperator)
	var s client.Status
	natstest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		s = statusOf(t, o, ids[1])
		return s.State.Terminal()
	}, "the second step never ended")
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, capsule.CodeDeadlineExceeded, capsule.ParseHaltReason(s.HaltReason).Code, s.HaltReason)
	require.Nil(t, rec.inputsOf(ids[1]), "its executor never ran")
}
