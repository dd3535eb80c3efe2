package cli_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/compose"
)

// gatedCompositionDoc is compositionDoc with its merge held at an operator
// gate.
func gatedCompositionDoc(t *testing.T, workspace, id string) []byte {
	t.Helper()
	var doc map[string]any
	require.NoError(t, json.Unmarshal(compositionDoc(t, workspace, id, ""), &doc))
	doc["steps"].([]any)[3].(map[string]any)["gate"] = compose.GateOperator
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	return b
}

// TestOnlineCompositionWait: composition wait exits 21 while a run cannot
// end in time (EXECUTION paused), 0 once it completed (-o json: its
// status); 3 while a step waits at its operator gate, 12 once the gate
// was rejected (the others passed: partial). decide and the other verbs
// need no --by (the operator's name, as every capsule verb). list is
// newest first and selects by --state, --producer and --limit.
func TestOnlineCompositionWait(t *testing.T) {
	t.Parallel()
	o := startChainOnline(t, &recorder{inputs: map[string][]capsule.Artifact{}})

	r := o.run(t, "phase", "pause", "EXECUTION", "--by", "test")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	r = o.run(t, "compose", file(t, compositionDoc(t, o.workspace, "w-ok", "")))
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	r = o.run(t, "composition", "wait", "w-ok", "--timeout", "500ms")
	require.Equal(t, cli.ExitTimeout, r.code, "%s%s", r.out, r.errOut)
	require.Contains(t, r.errOut, "composition w-ok run 1 still running")
	require.Contains(t, r.out, "composition w-ok run 1: running", "the status as it was at the timeout")
	r = o.run(t, "phase", "resume", "EXECUTION", "--by", "test")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	r = o.run(t, "composition", "wait", "w-ok", "--timeout", "60s", "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, "%s%s", r.out, r.errOut)
	var done compose.Outcome
	require.NoError(t, json.Unmarshal([]byte(r.out), &done))
	require.Equal(t, "completed", done.State)
	require.Equal(t, 4, done.Summary.Passed)
	require.Empty(t, r.errOut, "no terminal: no progress")

	r = o.run(t, "compose", file(t, gatedCompositionDoc(t, o.workspace, "w-gate")))
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	r = o.run(t, "composition", "wait", "w-gate", "--timeout", "60s")
	require.Equal(t, cli.ExitHuman, r.code, "%s%s", r.out, r.errOut)
	require.Contains(t, r.out, "composition w-gate run 1: running (3 of 4 passed")
	r = o.run(t, "composition", "decide", "w-gate", "merge", "reject", "--reason", "not this week")
	require.Equal(t, cli.ExitOK, r.code, "decide without --by names the operator: %s", r.errOut)
	r = o.run(t, "composition", "wait", "w-gate", "--timeout", "60s")
	require.Equal(t, 12, r.code, "a rejected gate, the others passed: partial: %s%s", r.out, r.errOut)
	require.Contains(t, r.out, "composition w-gate run 1: partial (3 of 4 passed, 1 failed, exit code 12)")
	r = o.run(t, "composition", "cancel", "w-gate")
	require.Equal(t, cli.ExitRefused, r.code, "refused for the run ended, not for a missing --by: %s", r.errOut)
	require.NotContains(t, r.errOut, "by")

	list := func(args ...string) []string {
		t.Helper()
		r := o.run(t, append([]string{"composition", "list", "-o", "json"}, args...)...)
		require.Equal(t, cli.ExitOK, r.code, r.errOut)
		var l adminsvc.CompositionListReply
		require.NoError(t, json.Unmarshal([]byte(r.out), &l))
		ids := []string{}
		for _, c := range l.Compositions {
			ids = append(ids, c.CompositionID)
		}
		return ids
	}
	require.Equal(t, []string{"w-gate", "w-ok"}, list(), "newest first")
	require.Equal(t, []string{"w-gate"}, list("--limit", "1"))
	require.Equal(t, []string{"w-ok"}, list("--state", "completed"))
	require.Equal(t, []string{"w-gate", "w-ok"}, list("--producer", "-"))
	require.Empty(t, list("--producer", "bob"))
	r = o.run(t, "composition", "list", "--state", "done")
	require.Equal(t, cli.ExitUsage, r.code, r.errOut)
}
