package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats.go's ObjectStore.Put (artifacts) starts this goroutine and can
		// clear its status channel before the goroutine reads it, which then
		// blocks on a nil channel forever: an upstream race, not ours.
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
	)
}

// result is one sagactl run.
type result struct {
	code        int
	out, errOut string
}

// run runs sagactl in-process.
func run(t *testing.T, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Main(args, &out, &errOut)
	return result{code: code, out: out.String(), errOut: errOut.String()}
}

// runStdin runs sagactl with stdin and returns its output and error.
func runStdin(t *testing.T, stdin []byte, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := cli.NewRoot(&out, &errOut)
	root.SetIn(bytes.NewReader(stdin))
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// file writes b to a new file and returns its path.
func file(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "capsule.json")
	require.NoError(t, os.WriteFile(p, b, 0o600))
	return p
}

func TestSeal(t *testing.T) {
	t.Parallel()

	t.Run("file", func(t *testing.T) {
		t.Parallel()
		doc := capsuletest.New()
		r := run(t, "seal", file(t, doc.Unsealed(t)))
		require.Equal(t, 0, r.code, r.errOut)
		require.Empty(t, r.errOut)
		require.NoError(t, capsule.VerifyIntegrity([]byte(r.out)))
		require.Equal(t, string(doc.Sealed(t)), r.out)
	})

	t.Run("stdin", func(t *testing.T) {
		t.Parallel()
		doc := capsuletest.New()
		out, err := runStdin(t, doc.Unsealed(t), "seal", "-")
		require.NoError(t, err)
		require.NoError(t, capsule.VerifyIntegrity([]byte(out)))
		var c capsule.Capsule
		require.NoError(t, json.Unmarshal([]byte(out), &c))
		require.Equal(t, doc.ID(), c.CapsuleID)
	})

	t.Run("reseal replaces a wrong digest", func(t *testing.T) {
		t.Parallel()
		doc := capsuletest.New().Set("integrity", map[string]any{"sha256": strings.Repeat("0", 64)})
		r := run(t, "seal", file(t, doc.Unsealed(t)))
		require.Equal(t, 0, r.code, r.errOut)
		require.NoError(t, capsule.VerifyIntegrity([]byte(r.out)))
	})

	failures := []struct {
		name    string
		args    func(t *testing.T) []string
		wantErr string
	}{
		{"not JSON", func(t *testing.T) []string { return []string{"seal", file(t, []byte("hello"))} }, "sagactl: seal: "},
		{"not an object", func(t *testing.T) []string { return []string{"seal", file(t, []byte("[1]"))} }, "sagactl: seal: "},
		{"missing file", func(t *testing.T) []string { return []string{"seal", filepath.Join(t.TempDir(), "nope.json")} }, "sagactl: read "},
		{"no argument", func(*testing.T) []string { return []string{"seal"} }, "sagactl: accepts 1 arg(s), received 0"},
	}
	for _, tt := range failures {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := run(t, tt.args(t)...)
			require.Equal(t, cli.ExitUsage, r.code)
			require.Empty(t, r.out)
			require.True(t, strings.HasPrefix(r.errOut, tt.wantErr), "stderr %q", r.errOut)
		})
	}
}

// liveNotEvaluated is what check never evaluates offline for a capsule
// without wave or dependencies.
var liveNotEvaluated = []string{
	"lock availability (RECEPTION)",
	"context_refs and target existence (REALITY_ANCHOR)",
	"rule 2 Well-formed identity (live part)",
}

func TestCheck(t *testing.T) {
	t.Parallel()
	past := time.Now().UTC().Add(-time.Hour).Format(time.RFC3339)
	tests := []struct {
		name     string
		raw      func(t *testing.T) []byte
		flags    []string
		wantCode int
		wantHalt string
		// wantRules are the rule numbers of the findings, in order (0: no rule).
		wantRules        []int
		wantNotEvaluated []string
		// wantHint is how the hint begins; empty for no hint.
		wantHint string
	}{
		{
			name: "valid sealed capsule", raw: func(t *testing.T) []byte { return capsuletest.New().Sealed(t) },
			wantCode: 0, wantRules: []int{}, wantNotEvaluated: liveNotEvaluated,
		},
		{
			name: "spec not approved",
			raw: func(t *testing.T) []byte {
				return capsuletest.New().Set("spec.approved", false).Delete("spec.problem_statement").Sealed(t)
			},
			wantCode: 1, wantHalt: "spec_not_approved:[approved, problem_statement]", wantRules: []int{35, 35},
			wantNotEvaluated: liveNotEvaluated,
		},
		{
			name: "absolute rules",
			raw: func(t *testing.T) []byte {
				return capsuletest.New().Set("review.reviewer_agent_id", "agent-coder-1").Set("review.max_cycles", 4).Sealed(t)
			},
			flags:    []string{"--reviewer-ids", "stub-reviewer,agent-coder-1"},
			wantCode: 1, wantHalt: "absolute_rules_violated:[20, 21]", wantRules: []int{20, 21},
			wantNotEvaluated: liveNotEvaluated,
		},
		{
			name: "reception halt comes first, rules still listed",
			raw: func(t *testing.T) []byte {
				return capsuletest.New().Set("budget.tokens", 0).Set("review.reviewer_agent_id", "agent-coder-1").Sealed(t)
			},
			flags:    []string{"--reviewer-ids", "agent-coder-1"},
			wantCode: 1, wantHalt: "budget_tokens_non_positive", wantRules: []int{0, 20},
			wantNotEvaluated: liveNotEvaluated,
		},
		{
			name: "deadline in the past",
			raw: func(t *testing.T) []byte {
				return capsuletest.New().Set("deadline", past).Set("created_at", past).Sealed(t)
			},
			wantCode: 1, wantHalt: "deadline_in_past", wantRules: []int{0},
			wantNotEvaluated: liveNotEvaluated,
		},
		{
			name: "integrity mismatch",
			raw: func(t *testing.T) []byte {
				return capsuletest.New().Set("integrity", map[string]any{"sha256": strings.Repeat("0", 64)}).Unsealed(t)
			},
			wantCode: 1, wantHalt: "integrity_mismatch", wantRules: []int{0},
			wantNotEvaluated: liveNotEvaluated, wantHint: "edited after sealing? sagactl seal ",
		},
		{
			name:     "not sealed",
			raw:      func(t *testing.T) []byte { return capsuletest.New().Unsealed(t) },
			wantCode: 1, wantHalt: "schema_invalid:/integrity", wantRules: []int{0},
			wantNotEvaluated: liveNotEvaluated[:2], wantHint: "not sealed: sagactl seal ",
		},
		{
			name:     "executor kinds flag keeps the built-in stub",
			raw:      func(t *testing.T) []byte { return capsuletest.New().Sealed(t) },
			flags:    []string{"--executor-kinds", "poetry"},
			wantCode: 0, wantRules: []int{}, wantNotEvaluated: liveNotEvaluated,
		},
		{
			name:     "reviewer ids flag keeps the built-in stub reviewer",
			raw:      func(t *testing.T) []byte { return capsuletest.New().Sealed(t) },
			flags:    []string{"--reviewer-ids", "agent-review-9"},
			wantCode: 0, wantRules: []int{}, wantNotEvaluated: liveNotEvaluated,
		},
		{
			name: "not JSON", raw: func(*testing.T) []byte { return []byte("hello") },
			wantCode: 1, wantHalt: "not_json", wantRules: []int{0},
			wantNotEvaluated: liveNotEvaluated[:2],
		},
		{
			name:     "unknown executor kind",
			raw:      func(t *testing.T) []byte { return capsuletest.New().Set("task.kind", "poetry").Sealed(t) },
			wantCode: 1, wantHalt: "absolute_rules_violated:[22]", wantRules: []int{22},
			wantNotEvaluated: liveNotEvaluated,
		},
		{
			name:  "executor kinds flag",
			raw:   func(t *testing.T) []byte { return capsuletest.New().Set("task.kind", "poetry").Sealed(t) },
			flags: []string{"--executor-kinds", "stub,poetry"}, wantCode: 0, wantRules: []int{},
			wantNotEvaluated: liveNotEvaluated,
		},
		{
			name: "unknown reviewer",
			raw: func(t *testing.T) []byte {
				return capsuletest.New().Set("review.reviewer_agent_id", "agent-review-9").Sealed(t)
			},
			wantCode: 1, wantHalt: "absolute_rules_violated:[22]", wantRules: []int{22},
			wantNotEvaluated: liveNotEvaluated,
		},
		{
			name: "reviewer ids flag",
			raw: func(t *testing.T) []byte {
				return capsuletest.New().Set("review.reviewer_agent_id", "agent-review-9").Sealed(t)
			},
			flags: []string{"--reviewer-ids", "agent-review-9"}, wantCode: 0, wantRules: []int{},
			wantNotEvaluated: liveNotEvaluated,
		},
		{
			name: "wave and dependencies are live facts",
			raw: func(t *testing.T) []byte {
				return capsuletest.New().Set("wave_id", "w1").Set("depends_on", []any{capsuletest.NewID()}).Sealed(t)
			},
			wantCode: 0, wantRules: []int{},
			wantNotEvaluated: append(append([]string{}, liveNotEvaluated...),
				"rule 19 Wave fits (live part)", "rule 24 Dependencies done (live part)"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := file(t, tt.raw(t))
			r := run(t, append(append([]string{"check", "-o", "json"}, tt.flags...), path)...)
			require.Equal(t, tt.wantCode, r.code, "stdout %s stderr %s", r.out, r.errOut)
			require.Empty(t, r.errOut)
			var rep cli.CheckReport
			require.NoError(t, json.Unmarshal([]byte(r.out), &rep))
			require.Equal(t, tt.wantCode == 0, rep.OK)
			require.Equal(t, tt.wantHalt, rep.HaltReason)
			rules := make([]int, len(rep.Findings))
			for i, f := range rep.Findings {
				rules[i] = f.Rule
				require.NotEmpty(t, f.Message)
			}
			require.Equal(t, tt.wantRules, rules, "findings %+v", rep.Findings)
			require.Equal(t, tt.wantNotEvaluated, rep.NotEvaluated)
			if tt.wantHint == "" {
				require.Empty(t, rep.Hint)
			} else {
				require.True(t, strings.HasPrefix(rep.Hint, tt.wantHint), "hint %q", rep.Hint)
			}

			// The same verdict for people.
			text := run(t, append(append([]string{"check"}, tt.flags...), path)...)
			require.Equal(t, tt.wantCode, text.code)
			if tt.wantCode == 0 {
				require.True(t, strings.HasPrefix(text.out, "ok: no findings\n"), text.out)
			} else {
				require.True(t, strings.HasPrefix(text.out, "would halt: "+tt.wantHalt+"\n  RULE  "), text.out)
			}
			for _, n := range tt.wantNotEvaluated {
				require.Contains(t, text.out, "not evaluated: "+n+"\n")
			}
			if tt.wantHint != "" {
				require.Contains(t, text.out, "\nhint: "+tt.wantHint+path+" ", "the hint names the file")
			}
		})
	}
}

func TestCheckFindingsNameFields(t *testing.T) {
	t.Parallel()
	path := file(t, capsuletest.New().Set("spec.approved", false).Sealed(t))
	r := run(t, "check", "-o", "json", path)
	require.Equal(t, cli.ExitFailure, r.code)
	var rep cli.CheckReport
	require.NoError(t, json.Unmarshal([]byte(r.out), &rep))
	require.Equal(t, []capsule.Finding{{
		Rule: 35, Title: "Spec approved before work", Field: "spec.approved", Message: "spec.approved is missing or unsatisfied",
	}}, rep.Findings)

	text := run(t, "check", path)
	require.Regexp(t, `(?m)^  35\s+spec\.approved\s+spec\.approved is missing or unsatisfied$`, text.out)
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := run(t, "--version")
	require.Equal(t, 0, r.code, r.errOut)
	require.Empty(t, r.errOut)
	require.Regexp(t, `^sagactl \S+ \(rev [^;]+; go\S+\)\n$`, r.out)
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	valid := func(t *testing.T) string { return file(t, capsuletest.New().Sealed(t)) }
	tests := []struct {
		name    string
		args    func(t *testing.T) []string
		wantErr string
	}{
		{"check unreadable file", func(t *testing.T) []string { return []string{"check", filepath.Join(t.TempDir(), "missing.json")} }, "sagactl: read "},
		{"check a directory", func(t *testing.T) []string { return []string{"check", t.TempDir()} }, "sagactl: read "},
		{"bad output format", func(t *testing.T) []string { return []string{"check", "-o", "toml", valid(t)} }, `sagactl: --output "toml": want table, wide, json, yaml or jsonpath=TEMPLATE`},
		{"bad output format, long flag", func(t *testing.T) []string { return []string{"--output=xml", "check", valid(t)} }, `sagactl: --output "xml": want table, wide, json, yaml or jsonpath=TEMPLATE`},
		{"list negative limit", func(*testing.T) []string { return []string{"list", "--limit", "-1"} }, `sagactl: --limit -1: want 0 (all) or more`},
		{"unknown flag", func(t *testing.T) []string { return []string{"check", "--frobnicate", valid(t)} }, "sagactl: unknown flag: --frobnicate"},
		{"unknown command", func(*testing.T) []string { return []string{"frobnicate"} }, `sagactl: unknown command "frobnicate"`},
		{"publish seal and raw", func(t *testing.T) []string { return []string{"publish", "--seal", "--raw", valid(t)} }, "sagactl: --seal and --raw exclude each other"},
		{"list bad state", func(*testing.T) []string { return []string{"list", "--state", "sleeping"} }, `sagactl: --state "sleeping": want one of`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := run(t, tt.args(t)...)
			require.Equal(t, cli.ExitUsage, r.code, "stderr %s", r.errOut)
			require.Empty(t, r.out)
			require.True(t, strings.HasPrefix(r.errOut, tt.wantErr), "stderr %q", r.errOut)
		})
	}
}

// TestTypoHint: cobra's suggestion for a mistyped command is indented by a
// tab, printed as one, not as a literal \t.
func TestTypoHint(t *testing.T) {
	t.Parallel()
	r := run(t, "stauts")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Equal(t, "sagactl: unknown command \"stauts\" for \"sagactl\"\n\nDid you mean this?\n\tstatus\n\n", r.errOut)
}

// online is an embedded server with a running pipeline.
type online struct {
	url       string
	js        jetstream.JetStream
	workspace string
	server    *server.Server
}

type tlogWriter struct{ t testing.TB }

func (w tlogWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// setupOnline starts a server, a pipeline and sagad's admin service: what
// one sagad runs.
func setupOnline(t *testing.T) *online { t.Helper(); return startOnline(t, true) }

// startOnline starts a server and a pipeline, and the admin service if
// admin (without it, admin commands find no sagad to answer).
func startOnline(t *testing.T, admin bool) *online {
	t.Helper()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)
	o := &online{url: s.ClientURL(), js: js, workspace: capsuletest.Workspace(t), server: s}
	ctx := context.Background()
	p, err := pipeline.New(ctx, js, pipeline.Config{
		Logger:     slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Workspace:  o.workspace,
		Workers:    4,
		AckWait:    2 * time.Second,
		Heartbeat:  300 * time.Millisecond,
		RetryDelay: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	if admin {
		agents, err := adminsvc.WatchAgents(nc, adminsvc.AgentWatchConfig{})
		require.NoError(t, err)
		t.Cleanup(agents.Stop)
		svc, err := adminsvc.Start(nc, p.Admin(), adminsvc.Config{
			Logger: slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
			Costs:  adminsvc.StoreCosts(p.Store()), Calls: p.Calls(), Agents: agents,
		})
		require.NoError(t, err)
		// Registered after the pipeline's cleanup, so it runs first: the
		// service stops before the pipeline, as in sagad.
		t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	}
	return o
}

// run runs sagactl against the fixture's server.
func (o *online) run(t *testing.T, args ...string) result {
	t.Helper()
	return run(t, append([]string{"--nats-url", o.url}, args...)...)
}

// own gives the capsule a target and lock of its own, so the capsules of a
// test never contend for a lock.
func (o *online) own(t *testing.T, d capsuletest.Doc) capsuletest.Doc {
	t.Helper()
	name := "own-" + d.ID() + ".txt"
	require.NoError(t, os.WriteFile(filepath.Join(o.workspace, name), []byte("x"), 0o644))
	return d.Set("target", "file:"+name).Set("constraints.resource_locks_required", []any{name})
}

func (o *online) intakeLastSeq(t *testing.T) uint64 {
	t.Helper()
	st, err := o.js.Stream(context.Background(), store.IntakeStream)
	require.NoError(t, err)
	info, err := st.Info(context.Background())
	require.NoError(t, err)
	return info.State.LastSeq
}

// eventKinds reads the EVENT column of `sagactl history`.
func eventKinds(t *testing.T, table string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	require.Regexp(t, `^AT\s+EVENT\s+PHASE\s+CYCLE\s+DETAIL$`, lines[0])
	kinds := make([]string, 0, len(lines)-1)
	for _, l := range lines[1:] {
		kinds = append(kinds, strings.Fields(l)[1])
	}
	return kinds
}

func TestOnlineCompleted(t *testing.T) {
	t.Parallel()
	o := setupOnline(t)
	doc := o.own(t, capsuletest.New())

	r := o.run(t, "publish", file(t, doc.Sealed(t)))
	require.Equal(t, 0, r.code, r.errOut)
	require.Equal(t, doc.ID()+"\n", r.out)

	r = o.run(t, "wait", "--timeout", "30s", doc.ID())
	require.Equal(t, 0, r.code, "stdout %s stderr %s", r.out, r.errOut)
	require.Regexp(t, `(?m)^capsule_id:\s+`+doc.ID()+`$`, r.out)
	require.Regexp(t, `(?m)^state:\s+completed$`, r.out)
	require.Regexp(t, `(?m)^phase:\s+6 HANDOFF$`, r.out)
	require.Regexp(t, `(?m)^progress:\s+100%$`, r.out)
	require.NotContains(t, r.out, "halt_reason:")

	t.Run("status json contract", func(t *testing.T) {
		r := o.run(t, "status", doc.ID(), "-o", "json")
		require.Equal(t, 0, r.code, r.errOut)
		var s map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.out), &s))
		require.Equal(t, doc.ID(), s["capsule_id"])
		require.Equal(t, "completed", s["state"])
		require.Equal(t, float64(6), s["phase"])
		require.Equal(t, "HANDOFF", s["phase_name"])
		require.Equal(t, float64(1), s["cycles_used"])
		require.Contains(t, s, "halt_reason")
		require.Equal(t, "", s["halt_reason"])
		history, ok := s["history"].([]any)
		require.True(t, ok, "history is an array: %v", s["history"])
		wantPhases := []string{"RECEPTION", "REALITY_ANCHOR", "PLANNING", "AUTOMATED_GATES", "EXECUTION", "REVIEW", "HANDOFF"}
		require.Len(t, history, len(wantPhases))
		var prev time.Time
		for i, h := range history {
			e := h.(map[string]any)
			require.Equal(t, float64(i), e["phase"])
			require.Equal(t, wantPhases[i], e["phase_name"])
			wantCycle, wantOutcome := float64(0), "passed"
			if i >= 4 {
				wantCycle = 1
			}
			if i == 6 {
				wantOutcome = "completed"
			}
			require.Equal(t, wantCycle, e["cycle"], "history[%d]", i)
			require.Equal(t, wantOutcome, e["outcome"], "history[%d]", i)
			at, err := time.Parse(time.RFC3339Nano, e["at"].(string))
			require.NoError(t, err)
			require.False(t, at.Before(prev), "history times never go back")
			prev = at
		}
	})

	t.Run("status table", func(t *testing.T) {
		r := o.run(t, "status", doc.ID())
		require.Equal(t, 0, r.code, r.errOut)
		require.Regexp(t, `(?m)^cycles_used:\s+1$`, r.out)
		require.Regexp(t, `(?m)^  \S+\s+6 HANDOFF\s+1\s+completed\s*$`, r.out)
	})

	t.Run("history in order", func(t *testing.T) {
		r := o.run(t, "history", doc.ID())
		require.Equal(t, 0, r.code, r.errOut)
		kinds := eventKinds(t, r.out)
		require.Equal(t, "received", kinds[0])
		require.Equal(t, "completed", kinds[len(kinds)-1])
		require.Len(t, kinds, 1+7+6+1, "received, 7 phase_completed, 6 phase_started, completed: %v", kinds)

		r = o.run(t, "history", doc.ID(), "-o", "json")
		require.Equal(t, 0, r.code, r.errOut)
		var events []capsule.Event
		require.NoError(t, json.Unmarshal([]byte(r.out), &events))
		require.Len(t, events, len(kinds))
		require.Equal(t, capsule.EventReceived, events[0].Kind)
		require.Equal(t, capsule.EventCompleted, events[len(events)-1].Kind)
		for i, e := range events {
			require.Equal(t, doc.ID(), e.Key)
			require.Equal(t, kinds[i], string(e.Kind))
		}
	})

	t.Run("list", func(t *testing.T) {
		r := o.run(t, "list", "--state", "completed", "-o", "json")
		require.Equal(t, 0, r.code, r.errOut)
		var list []client.Status
		require.NoError(t, json.Unmarshal([]byte(r.out), &list))
		require.Len(t, list, 1)
		require.Equal(t, doc.ID(), list[0].CapsuleID)

		r = o.run(t, "list", "--state", "halted", "-o", "json")
		require.Equal(t, 0, r.code, r.errOut)
		require.Equal(t, "[]\n", r.out)

		r = o.run(t, "list")
		require.Equal(t, 0, r.code, r.errOut)
		require.Regexp(t, `^CAPSULE_ID\s+STATE\s+PHASE\s+CYCLES\s+AGE\s+REASON\n`+doc.ID()+`\s+completed\s+6 HANDOFF\s+1\s+\S+\s+-\n$`, r.out)

		r = o.run(t, "list", "-o", "wide")
		require.Equal(t, 0, r.code, r.errOut)
		require.Regexp(t, `^CAPSULE_ID\s+KEY\s+STATE\s+PHASE\s+CYCLES\s+PROGRESS\s+UPDATED_AT\s+HALT_REASON\n`+doc.ID()+`\s+`+doc.ID()+`\s+completed\s+6 HANDOFF\s+1\s+100%\s+\S+\s+-\n$`, r.out)

		// Issue 35: for scripts, the rows alone, or the fields asked for.
		r = o.run(t, "list", "--no-headers")
		require.Equal(t, 0, r.code, r.errOut)
		require.Regexp(t, `^`+doc.ID()+`\s+completed\s+6 HANDOFF\s+1\s+\S+\s+-\n$`, r.out)
		r = o.run(t, "list", "-o", `jsonpath={[*].capsule_id}`)
		require.Equal(t, 0, r.code, r.errOut)
		require.Equal(t, doc.ID(), r.out)
		r = o.run(t, "list", "-o", `jsonpath={range [*]}{.capsule_id} {.state}{"\n"}{end}`)
		require.Equal(t, 0, r.code, r.errOut)
		require.Equal(t, doc.ID()+" completed\n", r.out)
		r = o.run(t, "history", doc.ID(), "--no-headers")
		require.Equal(t, 0, r.code, r.errOut)
		require.NotContains(t, r.out, "EVENT")
		require.Regexp(t, `^\S+\s+received\s`, r.out)
		r = o.run(t, "list", "-o", "jsonpath={.unclosed")
		require.Equal(t, cli.ExitUsage, r.code)
		require.Contains(t, r.errOut, `jsonpath "{.unclosed": a { without its }`)
	})

	t.Run("yaml has the json keys", func(t *testing.T) {
		for _, args := range [][]string{{"status", doc.ID()}, {"history", doc.ID()}, {"list"}} {
			rj := o.run(t, append(args, "-o", "json")...)
			require.Equal(t, 0, rj.code, rj.errOut)
			ry := o.run(t, append(args, "-o", "yaml")...)
			require.Equal(t, 0, ry.code, ry.errOut)
			var fromJSON, fromYAML any
			require.NoError(t, json.Unmarshal([]byte(rj.out), &fromJSON))
			require.NoError(t, yaml.Unmarshal([]byte(ry.out), &fromYAML))
			// Through JSON both sides compare as the same generic values
			// (YAML reads numbers as int, timestamps as strings here).
			b, err := json.Marshal(fromYAML)
			require.NoError(t, err)
			var normalised any
			require.NoError(t, json.Unmarshal(b, &normalised))
			require.Equal(t, fromJSON, normalised, "%v", args)
		}
	})

	t.Run("publish json", func(t *testing.T) {
		again := o.own(t, capsuletest.New())
		r := o.run(t, "publish", "-o", "json", file(t, again.Sealed(t)))
		require.Equal(t, 0, r.code, r.errOut)
		var got struct {
			CapsuleID string `json:"capsule_id"`
			IntakeSeq uint64 `json:"intake_seq"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.out), &got))
		require.Equal(t, again.ID(), got.CapsuleID)
		require.Equal(t, uint64(2), got.IntakeSeq)
		require.Equal(t, 0, o.run(t, "wait", "--timeout", "30s", again.ID()).code)
	})
}

func TestOnlineHalted(t *testing.T) {
	t.Parallel()
	o := setupOnline(t)
	doc := o.own(t, capsuletest.New().Stub(map[string]any{"fail": "model refused"}))
	r := o.run(t, "publish", file(t, doc.Sealed(t)))
	require.Equal(t, 0, r.code, r.errOut)

	r = o.run(t, "wait", "--timeout", "30s", doc.ID())
	require.Equal(t, cli.ExitFailure, r.code, "stdout %s stderr %s", r.out, r.errOut)
	require.Empty(t, r.errOut)
	require.Regexp(t, `(?m)^state:\s+halted$`, r.out)
	require.Regexp(t, `(?m)^phase:\s+4 EXECUTION$`, r.out)
	require.Regexp(t, `(?m)^halt_reason:\s+executor_failed:model refused$`, r.out)

	r = o.run(t, "wait", "-o", "json", doc.ID())
	require.Equal(t, cli.ExitFailure, r.code)
	var s client.Status
	require.NoError(t, json.Unmarshal([]byte(r.out), &s))
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, "executor_failed:model refused", s.HaltReason)
	require.Equal(t, 1, s.CyclesUsed)

	r = o.run(t, "history", doc.ID())
	require.Equal(t, 0, r.code, r.errOut)
	kinds := eventKinds(t, r.out)
	require.Equal(t, "received", kinds[0])
	require.Equal(t, "halted", kinds[len(kinds)-1])
}

// edited is a sealed capsule whose title changed after sealing.
func edited(t *testing.T) []byte {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(capsuletest.New().Sealed(t), &m))
	m["task"].(map[string]any)["title"] = "changed after sealing"
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}

func TestOnlinePublishRefusesNonCapsules(t *testing.T) {
	t.Parallel()
	o := setupOnline(t)
	refused := []struct {
		name    string
		raw     []byte
		args    []string
		wantErr string
	}{
		{"plain text", []byte("hello, sagad"), nil, "sagactl: not a capsule: not JSON: "},
		{"JSON but not a capsule", []byte(`{"hello":"sagad"}`), nil, "sagactl: not a capsule: invalid capsule: "},
		{"unsealed capsule", capsuletest.New().Unsealed(t), nil, "sagactl: not a capsule: invalid capsule: /integrity: required property missing"},
		{"seal of plain text", []byte("hello"), []string{"--seal"}, "sagactl: not a capsule: "},
		{"edited after sealing", edited(t), nil, "sagactl: integrity_mismatch: integrity.sha256 is "},
	}
	for _, tt := range refused {
		r := o.run(t, append(append([]string{"publish"}, tt.args...), file(t, tt.raw))...)
		require.Equal(t, cli.ExitUsage, r.code, "%s: %s", tt.name, r.errOut)
		require.Empty(t, r.out, tt.name)
		require.True(t, strings.HasPrefix(r.errOut, tt.wantErr), "%s: stderr %q", tt.name, r.errOut)
	}
	r := o.run(t, "publish", file(t, edited(t)))
	require.Contains(t, r.errOut, "\nsagactl: (edited after sealing? publish --seal recomputes the digest; --raw sends it as is)\n")
	r = o.run(t, "publish", file(t, capsuletest.New().Unsealed(t)))
	require.Contains(t, r.errOut, "\nsagactl: (not sealed? publish --seal fills in integrity.sha256; sagactl seal FILE prints it sealed)\n")
	require.Equal(t, uint64(0), o.intakeLastSeq(t), "nothing was published")

	r = o.run(t, "publish", "--raw", file(t, []byte("hello, sagad")))
	require.Equal(t, 0, r.code, r.errOut)
	require.Equal(t, "published raw bytes as intake message 1 (see: sagactl list --state halted)\n", r.out)
	require.Equal(t, uint64(1), o.intakeLastSeq(t))

	r = o.run(t, "wait", "--timeout", "30s", "x-1")
	require.Equal(t, cli.ExitFailure, r.code, "stdout %s stderr %s", r.out, r.errOut)
	require.Regexp(t, `(?m)^halt_reason:\s+not_json$`, r.out)

	r = o.run(t, "list", "--state", "halted", "-o", "json")
	require.Equal(t, 0, r.code, r.errOut)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.out), &list), r.out)
	require.Len(t, list, 1)
	require.Equal(t, "x-1", list[0]["key"])
	require.Equal(t, "", list[0]["capsule_id"])
	require.Equal(t, "halted", list[0]["state"])
	require.Equal(t, "not_json", list[0]["halt_reason"])
	require.Equal(t, float64(0), list[0]["phase"])
	require.Equal(t, "RECEPTION", list[0]["phase_name"])
	r = o.run(t, "list", "--state", "halted")
	require.Equal(t, 0, r.code, r.errOut)
	require.Regexp(t, `(?m)^x-1\s+halted\s+0 RECEPTION\s`, r.out, "the key names a capsule without an id")

	r = o.run(t, "list", "--state", "completed", "-o", "json")
	require.Equal(t, 0, r.code, r.errOut)
	require.Equal(t, "[]\n", r.out)
}

func TestOnlinePublishSeal(t *testing.T) {
	t.Parallel()
	o := setupOnline(t)

	doc := o.own(t, capsuletest.New())
	r := o.run(t, "publish", "--seal", file(t, doc.Unsealed(t)))
	require.Equal(t, 0, r.code, r.errOut)
	require.Equal(t, doc.ID()+"\n", r.out)
	require.Equal(t, 0, o.run(t, "wait", "--timeout", "30s", doc.ID()).code)

	// The same from stdin.
	fromStdin := o.own(t, capsuletest.New())
	out, err := runStdin(t, fromStdin.Unsealed(t), "--nats-url", o.url, "publish", "--seal", "-")
	require.NoError(t, err)
	require.Equal(t, fromStdin.ID()+"\n", out)
	r = o.run(t, "wait", "--timeout", "30s", "-o", "json", fromStdin.ID())
	require.Equal(t, 0, r.code, "stdout %s stderr %s", r.out, r.errOut)
	var s client.Status
	require.NoError(t, json.Unmarshal([]byte(r.out), &s))
	require.Equal(t, capsule.Completed, s.State)
}

func TestOnlineNotFound(t *testing.T) {
	t.Parallel()
	o := setupOnline(t)
	id := capsuletest.NewID()
	tests := []struct {
		name string
		args []string
	}{
		{"status", []string{"status", id}},
		{"status of an x- key", []string{"status", "x-999"}},
		{"history", []string{"history", id}},
		{"wait", []string{"wait", "--timeout", "200ms", id}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := o.run(t, tt.args...)
			require.Equal(t, cli.ExitNotFound, r.code, "stdout %s stderr %s", r.out, r.errOut)
			require.Empty(t, r.out)
			require.Regexp(t, regexp.MustCompile(`^sagactl: .*not found`), r.errOut)
		})
	}
}

func TestOnlineNoDaemon(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t) // NATS without sagad's topology
	r := run(t, "--nats-url", s.ClientURL(), "status", capsuletest.NewID())
	require.Equal(t, cli.ExitFailure, r.code)
	require.Equal(t, "sagactl: "+store.ErrNoTopology.Error()+"\n", r.errOut)
}
