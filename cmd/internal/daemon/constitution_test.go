package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natsconn"
	"github.com/sagad/sagad/rules"
)

// TestConstitutionConfigErrors: a bad constitution stops sagad at start
// with an error naming the field.
func TestConstitutionConfigErrors(t *testing.T) {
	t.Parallel()
	for file, want := range map[string]string{
		`{"constitution": {"deny_path": ["infra"]}}`:             `constitution: json: unknown field "deny_path"`,
		`{"constitution": {"max_tokens": -5}}`:                   `constitution: rules: invalid config: max_tokens: -5 must be positive`,
		`{"constitution": {"deny_paths": ["../up"]}}`:            `constitution: rules: invalid config: deny_paths[0]`,
		`{"constitution": {"horizon": "a week"}}`:                `constitution: horizon: time: invalid duration "a week"`,
		`{"constitution": {"allowed_hosts": ["http://x"]}}`:      `allowed_hosts[0]: "http://x" is not a host name`,
		`{"default_reviewer": "nobody"}`:                         `default_reviewer: "nobody" is not a configured reviewer (stub-reviewer)`,
		`{"constitution": {"max_locks": 100000}}`:                `max_locks: 100000 is above RECEPTION's hard limit`,
		`{"constitution": {"max_capsule_bytes": 1048576}}`:       `max_capsule_bytes: 1048576 is above sagad's intake limit of 524288 bytes`,
		`{"constitution": {"supported_majors": []}}`:             `supported_majors: at least one is required`,
		`{"constitution": {"max_dollars": -1, "max_locks": -1}}`: `max_locks: -1 must be positive`,
	} {
		_, err := parseConfig([]string{"--config", writeConfig(t, file)}, envOf(nil), io.Discard)
		require.ErrorContains(t, err, want, file)
	}

	// A configured reviewer may be the default.
	cfg, err := parseConfig([]string{"--config", writeConfig(t, `{
		"reviewers": {"r1": {"type": "nats", "subject": "agents.review.one"}},
		"default_reviewer": "r1",
		"constitution": {"deny_paths": [".git", "infra"], "horizon": "48h"}}`)}, envOf(nil), io.Discard)
	require.NoError(t, err)
	require.Equal(t, "r1", cfg.DefaultReviewer)
	require.Equal(t, []string{".git", "infra"}, cfg.Constitution.DenyPaths)
	require.Equal(t, 48*time.Hour, cfg.Constitution.Horizon)
}

// TestConstitutionFromConfig: a sagad whose config file changes rule
// parameters enforces them, and `sagactl rules -o json` against it shows
// them; its default reviewer serves a capsule that declares none.
func TestConstitutionFromConfig(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	file := writeConfig(t, `{
		"default_reviewer": "stub-reviewer",
		"constitution": {"deny_paths": [".git", "infra"], "max_tokens": 5000}
	}`)
	workspace := capsuletest.Workspace(t)
	require.NoError(t, os.MkdirAll(filepath.Join(workspace, "infra"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(workspace, "infra", "main.tf"), []byte("x"), 0o644))
	cfg, err := parseConfig([]string{
		"--config", file,
		"--nats-listen", "127.0.0.1:-1", "--data-dir", dataDir, "--workspace", workspace,
		"--http-listen", "off", "--log-level", "warn", "--shutdown-timeout", "10s",
	}, envOf(nil), io.Discard)
	require.NoError(t, err)
	d := start(t, cfg)
	_, c := connect(t, d.url, dataDir)

	wait := func(doc capsuletest.Doc) (state capsule.State, halt string, reviewer string) {
		t.Helper()
		_, err := c.Publish(context.Background(), doc.Sealed(t), "")
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := c.Wait(ctx, doc.ID())
		require.NoError(t, err)
		return s.State, s.HaltReason, s.Reviewer
	}
	// Within the defaults, beyond the configured ceiling (Rule 18).
	state, halt, _ := wait(capsuletest.New().Set("budget", map[string]any{"tokens": 6000, "dollars": 1}))
	require.Equal(t, capsule.Halted, state)
	require.Equal(t, "absolute_rules_violated:[18]", halt)
	// Inside the configured deny list (Rule 6).
	state, halt, _ = wait(capsuletest.New().Set("target", "file:infra/main.tf").
		Set("constraints.resource_locks_required", []any{"infra/main.tf"}).
		Set("budget", map[string]any{"tokens": 4000, "dollars": 1}))
	require.Equal(t, capsule.Halted, state)
	require.Equal(t, "absolute_rules_violated:[6]", halt)
	// No reviewer declared: the default reviews.
	state, halt, reviewer := wait(capsuletest.New().Delete("review.reviewer_agent_id").
		Set("budget", map[string]any{"tokens": 4000, "dollars": 1}))
	require.Equal(t, capsule.Completed, state, "halt: %s", halt)
	require.Equal(t, "stub-reviewer", reviewer)

	// sagactl rules shows what this sagad enforces; --offline the defaults.
	var versions []string // the constitution versions ctl saw, in order
	ctl := func(args ...string) []rules.RuleInfo {
		t.Helper()
		var out, errOut bytes.Buffer
		code := cli.Main(append([]string{"--nats-url", d.url, "--nats-nkey", filepath.Join(CredsDir(dataDir), RoleOperator+natsconn.SeedExt)}, args...), &out, &errOut)
		require.Equal(t, cli.ExitOK, code, errOut.String())
		var rep rules.Report
		require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String())
		require.True(t, strings.HasPrefix(rep.Version, rules.Version+"+"), rep.Version)
		versions = append(versions, rep.Version)
		return rep.Rules
	}
	params := func(list []rules.RuleInfo, n int) map[string]any {
		i := slices.IndexFunc(list, func(r rules.RuleInfo) bool { return r.Number == n })
		require.GreaterOrEqual(t, i, 0)
		return list[i].Params
	}
	live := ctl("rules", "-o", "json")
	require.Equal(t, []any{".git", "infra"}, params(live, 6)["deny_paths"])
	require.Equal(t, float64(5000), params(live, 18)["max_tokens"])
	require.Equal(t, "stub-reviewer", params(live, 20)["default_reviewer"])
	builtin := ctl("rules", "--offline", "-o", "json")
	require.Equal(t, []any{".git", ".env", "secrets"}, params(builtin, 6)["deny_paths"])
	require.Equal(t, float64(10_000_000), params(builtin, 18)["max_tokens"])
	require.Len(t, versions, 2)
	require.Equal(t, rules.VersionOf(rules.Config{}), versions[1])
	require.NotEqual(t, versions[1], versions[0], "this sagad's parameters are not the defaults: its version says so")
}
