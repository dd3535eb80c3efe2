package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
)

// compositionDoc is draft → (fr, de) → merge, each step with a target and
// lock of its own; badKind, when set, is the merge's task.kind.
func compositionDoc(t *testing.T, workspace, id, badKind string) []byte {
	t.Helper()
	at := time.Now().UTC().Truncate(time.Hour)
	type st struct {
		name, kind string
		needs      []string
	}
	var steps []any
	for _, s := range []st{
		{"draft", "produce", nil},
		{"fr", "translate", []string{"draft"}},
		{"de", "translate", []string{"draft"}},
		{"merge", "validate", []string{"fr", "de"}},
	} {
		if s.name == "merge" && badKind != "" {
			s.kind = badKind
		}
		name := id + "-" + s.name + ".txt"
		require.NoError(t, os.WriteFile(filepath.Join(workspace, name), []byte("x"), 0o644))
		d := capsuletest.New().Delete("capsule_id").Set("task.kind", s.kind).
			Set("task.title", s.name).Set("target", "file:"+name).
			Set("constraints.resource_locks_required", []any{name}).
			Set("created_at", at.Format(time.RFC3339)).Set("deadline", at.Add(3*time.Hour).Format(time.RFC3339)).
			Set("spec.approved_at", at.Add(-time.Minute).Format(time.RFC3339))
		step := map[string]any{"name": s.name, "capsule": map[string]any(d)}
		if len(s.needs) > 0 {
			step["needs"] = s.needs
		}
		steps = append(steps, step)
	}
	b, err := json.Marshal(map[string]any{"composition_id": id, "steps": steps})
	require.NoError(t, err)
	return b
}

// TestOnlineCompose: sagactl compose prints every step's name and capsule
// id; the merge reads both translations. A document with an unserved kind
// is refused whole (exit 2, the step's findings), and check --composition
// gives the same verdict offline.
func TestOnlineCompose(t *testing.T) {
	t.Parallel()
	rec := &recorder{inputs: map[string][]capsule.Artifact{}}
	o := startChainOnline(t, rec)

	r := o.run(t, "compose", file(t, compositionDoc(t, o.workspace, "fan", "")), "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var res cli.ComposeResult
	require.NoError(t, json.Unmarshal([]byte(r.out), &res))
	require.Equal(t, "fan", res.CompositionID)
	require.Equal(t, 1, res.Run)
	ids := map[string]string{}
	for _, s := range res.Steps {
		ids[s.Name] = s.CapsuleID
	}
	require.Len(t, ids, 4)
	r = o.run(t, "wait", ids["merge"], "--timeout", "30s")
	require.Equal(t, cli.ExitOK, r.code, "%s%s", r.out, r.errOut)
	var from []string
	for _, a := range rec.inputsOf(ids["merge"]) {
		from = append(from, a.CapsuleID)
	}
	require.ElementsMatch(t, []string{ids["fr"], ids["de"]}, from)

	var st struct {
		CompositionID string `json:"composition_id"`
		Run           int    `json:"run"`
		State         string `json:"state"`
		Summary       struct {
			Total, Passed, Failed int
			ExitCode              int `json:"exit_code"`
		} `json:"summary"`
		Steps []struct {
			Name      string `json:"name"`
			CapsuleID string `json:"capsule_id"`
			State     string `json:"state"`
			ExitCode  *int   `json:"exit_code"`
			Artifact  string `json:"artifact"`
		} `json:"steps"`
	}
	natstest.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool {
		r := o.run(t, "composition", "status", "fan", "-o", "json")
		require.Equal(t, cli.ExitOK, r.code, r.errOut)
		require.NoError(t, json.Unmarshal([]byte(r.out), &st))
		return st.State != "running"
	}, "the composition ends")
	require.Equal(t, "completed", st.State)
	require.Equal(t, 4, st.Summary.Total)
	require.Equal(t, 4, st.Summary.Passed)
	require.Zero(t, st.Summary.ExitCode)
	for _, s := range st.Steps {
		require.Equal(t, ids[s.Name], s.CapsuleID)
		require.Equal(t, "completed", s.State)
		require.NotNil(t, s.ExitCode)
		require.NotEmpty(t, s.Artifact)
	}
	r = o.run(t, "composition", "list")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, "completed")
	r = o.run(t, "__complete", "composition", "status", "fa")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Equal(t, "fan\n:4\n", firstLines(r.out), "the shell completes composition ids")
	r = o.run(t, "composition", "status", "fan")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, "composition fan run 1: completed (4 of 4 passed, 0 failed, exit code 0)")
	// The table is the graph as a tree: the translations under the
	// draft, the merge under its first need, saying it waits for the other.
	var tree []string
	for _, l := range strings.Split(r.out, "\n")[2:] {
		if f := strings.Fields(l); len(f) > 0 {
			tree = append(tree, strings.TrimRight(l[:strings.Index(l, ids[f[0]])], " "))
		}
	}
	require.Equal(t, []string{"draft", "  fr", "    merge (+de)", "  de"}, tree, r.out)
	r = o.run(t, "composition", "cancel", "fan", "--by", "ops")
	require.Equal(t, cli.ExitRefused, r.code, r.errOut)
	r = o.run(t, "composition", "decide", "fan", "merge", "maybe", "--by", "ops")
	require.Equal(t, cli.ExitUsage, r.code, r.errOut)
	r = o.run(t, "composition", "decide", "fan", "merge", "accept", "--by", "ops")
	require.Equal(t, cli.ExitRefused, r.code, "no gate, and the run ended: %s", r.errOut)
	r = o.run(t, "composition", "status", "nope")
	require.Equal(t, cli.ExitNotFound, r.code, r.errOut)

	r = o.run(t, "compose", file(t, compositionDoc(t, o.workspace, "fan", "")))
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, "composition fan run 1")
	require.Contains(t, r.out, ids["merge"])

	bad := file(t, compositionDoc(t, o.workspace, "bad", "nobody-serves"))
	r = o.run(t, "compose", bad)
	require.Equal(t, cli.ExitUsage, r.code, r.errOut)
	require.Contains(t, r.errOut, `step 3 "merge": rule 22`)
	require.Contains(t, r.errOut, "nobody-serves")

	r = run(t, "check", "--composition", bad, "--executor-kinds", "produce,translate,validate", "-o", "json")
	require.Equal(t, cli.ExitFailure, r.code, r.errOut)
	var chk cli.CompositionCheck
	require.NoError(t, json.Unmarshal([]byte(r.out), &chk))
	require.False(t, chk.OK)
	for _, f := range chk.Findings {
		require.Equal(t, 3, f.Step, "%v", f)
	}
	r = run(t, "check", "--composition", file(t, compositionDoc(t, o.workspace, "fan", "")), "--executor-kinds", "produce,translate,validate")
	require.Equal(t, cli.ExitOK, r.code, "%s%s", r.out, r.errOut)
}
