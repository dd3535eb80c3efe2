package cli_test

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/rules"
)

// offline runs sagactl pointed at a NATS URL nobody serves: rules must not
// need it.
func offline(args ...string) obsResult {
	var out, errOut bytes.Buffer
	code := cli.Main(append([]string{"--nats-url", "nats://127.0.0.1:1"}, args...), &out, &errOut)
	return obsResult{code: code, out: out.String(), errOut: errOut.String()}
}

func TestRulesTable(t *testing.T) {
	t.Parallel()
	r := offline("rules", "--offline")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	lines := strings.Split(strings.TrimRight(r.out, "\n"), "\n")
	require.Equal(t, "constitution version "+rules.VersionOf(rules.Config{})+" (26 rules)", lines[0])
	require.Regexp(t, `^constitution version `+regexp.QuoteMeta(rules.Version)+`\+[0-9a-f]{8} \(26 rules\)$`, lines[0])
	require.Empty(t, lines[1])
	require.Regexp(t, `^NUMBER\s+TITLE\s+KIND\s+ENFORCED_AT\s+PARAMS$`, lines[2])
	rows := lines[3:]
	require.Len(t, rows, 26)
	for i, want := range rules.Constitution {
		require.True(t, strings.HasPrefix(rows[i], strconv.Itoa(want.Number)+" "), rows[i])
		require.Contains(t, rows[i], want.Title)
		require.Contains(t, rows[i], string(want.Kind))
	}
	require.Regexp(t, `^12\s+Max review cycles \(3\)\s+structural\s+REVIEW → EXECUTION loop\s+max_cycles=3$`, rows[11])
	require.Regexp(t, `^4\s+Independent spec approval\s+absolute\s+-\s+-$`, rows[3])
	require.Regexp(t, `^10\s+Size limits\s+absolute\s+-\s+max_acceptance_criteria=64 max_capsule_bytes=131072 max_context_refs=64 max_locks=32$`, rows[9],
		"params k=v, sorted by key")
	require.Regexp(t, regexp.MustCompile(`^6\s+.*deny_paths=\[\.git,\.env,secrets\]$`), rows[5])
}

func TestRulesJSON(t *testing.T) {
	t.Parallel()
	r := offline("rules", "--offline", "-o", "json", "--executor-kinds", "codegen", "--reviewer-ids", "agent-review-2")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)

	var raw map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(r.out), &raw))
	require.Len(t, raw, 2)
	var version string
	require.NoError(t, json.Unmarshal(raw["version"], &version))
	require.Regexp(t, `^`+regexp.QuoteMeta(rules.Version)+`\+[0-9a-f]{8}$`, version)
	require.NotEqual(t, rules.VersionOf(rules.Config{}), version, "other executor kinds and reviewers are other parameters")

	var list []map[string]any
	require.NoError(t, json.Unmarshal(raw["rules"], &list))
	require.Len(t, list, 26)
	structural := 0
	for i, rl := range list {
		require.ElementsMatch(t, []string{"number", "title", "kind", "enforced_at", "params"}, keys(rl))
		require.EqualValues(t, rules.Constitution[i].Number, rl["number"], "ascending by number")
		require.Contains(t, []any{"structural", "absolute"}, rl["kind"])
		require.IsType(t, map[string]any{}, rl["params"], "params is always an object")
		if rl["kind"] == "structural" {
			structural++
			require.NotEmpty(t, rl["enforced_at"])
		} else {
			require.Empty(t, rl["enforced_at"])
		}
	}
	require.Equal(t, 5, structural)
	i := slices.IndexFunc(list, func(rl map[string]any) bool { return rl["number"] == float64(22) })
	require.Equal(t, map[string]any{"executor_kinds": []any{"codegen", "stub"}, "reviewer_ids": []any{"agent-review-2", "stub-reviewer"}},
		list[i]["params"], "rule 22 takes --executor-kinds and --reviewer-ids, besides the built-in stubs, sorted as sagad lists them")
}

// TestRulesAsksSagad: without --offline, rules is a request to sagad's
// admin service (here no NATS answers at all); the offline-only flags are
// refused without --offline.
func TestRulesAsksSagad(t *testing.T) {
	t.Parallel()
	r := offline("rules")
	require.Equal(t, cli.ExitFailure, r.code, r.out+r.errOut)
	require.Contains(t, r.errOut, "is sagad running?")
	require.Empty(t, r.out)
	r = offline("rules", "--executor-kinds", "stub")
	require.Equal(t, cli.ExitUsage, r.code, r.out+r.errOut)
	require.Contains(t, r.errOut, "--offline")
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
