package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/capsuletest"
)

// TestOnlineCost drives `sagactl cost` as an operator would: the spend of a
// completed and a halted capsule per kind and per wave, as a table, JSON
// and YAML; bad flags are usage errors before sagad is asked.
func TestOnlineCost(t *testing.T) {
	t.Parallel()
	o := setupOnline(t)
	ok := o.own(t, capsuletest.New().Set("wave_id", "w1").Stub(map[string]any{"usage": map[string]any{"tokens": 1500, "dollars": 0.03}}))
	bad := o.own(t, capsuletest.New().Stub(map[string]any{"fail": "worker out of disk"}))
	for _, d := range []capsuletest.Doc{ok, bad} {
		r := o.run(t, "publish", file(t, d.Sealed(t)))
		require.Equal(t, cli.ExitOK, r.code, r.errOut)
	}
	o.waitState(t, ok.ID(), capsule.Completed)
	o.waitState(t, bad.ID(), capsule.Halted)

	r := o.run(t, "cost", "--by", "kind", "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var rep adminsvc.CostReply
	require.NoError(t, json.Unmarshal([]byte(r.out), &rep))
	require.Len(t, rep.Groups, 1)
	require.Equal(t, "stub", rep.Groups[0].Key)
	require.Equal(t, 2, rep.Groups[0].Capsules)
	require.Equal(t, 1, rep.Groups[0].FailedCapsules)

	r = o.run(t, "cost", "--since", "1h", "-o", "yaml")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.NoError(t, yaml.Unmarshal([]byte(r.out), &rep))
	require.Equal(t, "wave", rep.By)
	require.Equal(t, 2, rep.Total.Capsules)

	r = o.run(t, "cost")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	require.Len(t, lines, 4, r.out) // header, w1, -, total
	require.Contains(t, lines[0], "WAVE")
	require.Contains(t, r.out, "w1")
	require.Contains(t, r.out, "1,500")
	require.Contains(t, r.out, "$0.03")
	require.True(t, strings.HasPrefix(lines[3], "total"), r.out)

	r = o.run(t, "cost", "--by", "composition")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, "COMPOSITION", "capsules of no composition group under -")
	require.Empty(t, r.errOut)

	for _, args := range [][]string{
		{"cost", "--by", "capsule"},
		{"cost", "--since", "yesterday"},
		{"cost", "--limit", "-1"},
		{"cost", "extra"},
	} {
		r = o.run(t, args...)
		require.Equal(t, cli.ExitUsage, r.code, "%v: %s", args, r.errOut)
	}
}
