package cli_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/cmd/internal/cli"
)

// TestOnlineCompositionWaveNamed: a composition's budget is a wave named
// composition-<its first step's id>; sagactl wave list and wave show name
// it by the composition, the id beside it, and -o json adds the name
// under composition without changing wave_id.
func TestOnlineCompositionWaveNamed(t *testing.T) {
	t.Parallel()
	o := startChainOnline(t, &recorder{inputs: map[string][]capsule.Artifact{}})
	var doc map[string]any
	require.NoError(t, json.Unmarshal(compositionDoc(t, o.workspace, "budgeted", ""), &doc))
	doc["budget"] = map[string]any{"tokens": 1000000}
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	r := o.run(t, "compose", file(t, b), "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var res cli.ComposeResult
	require.NoError(t, json.Unmarshal([]byte(r.out), &res))
	wave := "composition-" + res.Steps[0].CapsuleID

	r = o.run(t, "wave", "list")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, "budgeted ("+wave+")")
	r = o.run(t, "wave", "show", wave)
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Regexp(t, `(?m)^composition:\s+budgeted$`, r.out)
	r = o.run(t, "wave", "list", "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var waves []struct {
		WaveID      string `json:"wave_id"`
		Composition string `json:"composition"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &waves))
	require.Contains(t, waves, struct {
		WaveID      string `json:"wave_id"`
		Composition string `json:"composition"`
	}{wave, "budgeted"})
	r = o.run(t, "__complete", "wave", "show", "composition-")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, wave+"\tcomposition budgeted\n", "completion describes the wave by its composition")
}
