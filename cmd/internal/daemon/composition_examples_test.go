package daemon

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/natsconn"
	"github.com/sagad/sagad/internal/natstest"
)

// TestCompositionExamplesRun runs every composition document of
// examples/compositions as its README does, against a running sagad with
// the example's config: sagactl compose prints each step, a gated step is
// accepted by a person, the run ends completed with exit code 0, and
// composing the same document again starts nothing new.
func TestCompositionExamplesRun(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../../..")
	require.NoError(t, err)
	exDir := filepath.Join(root, "examples", "compositions")
	entries, err := os.ReadDir(exDir)
	require.NoError(t, err)
	var docs []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".json") && e.Name() != "sagad.json" {
			docs = append(docs, e.Name())
		}
	}
	require.NotEmpty(t, docs)

	dataDir := t.TempDir()
	cfg, err := parseConfig([]string{
		"--config", filepath.Join(exDir, "sagad.json"),
		"--nats-listen", "127.0.0.1:-1", "--data-dir", dataDir, "--workspace", root,
		"--http-listen", "off", "--log-level", "warn", "--shutdown-timeout", "10s",
	}, envOf(nil), io.Discard)
	require.NoError(t, err)
	d := start(t, cfg)
	ctl := func(args ...string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := cli.Main(append([]string{"--nats-url", d.url, "--nats-nkey", filepath.Join(CredsDir(dataDir), RoleOperator+natsconn.SeedExt)}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}

	for _, name := range docs {
		path := filepath.Join(exDir, name)
		var doc struct {
			CompositionID string `json:"composition_id"`
			Steps         []struct {
				Name string `json:"name"`
			} `json:"steps"`
		}
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &doc), name)

		code, out, errOut := ctl("compose", path, "-o", "json")
		require.Equal(t, cli.ExitOK, code, "%s: %s", name, errOut)
		var res cli.ComposeResult
		require.NoError(t, json.Unmarshal([]byte(out), &res))
		require.Equal(t, doc.CompositionID, res.CompositionID)
		require.Equal(t, 1, res.Run)
		require.Len(t, res.Steps, len(doc.Steps))

		var st struct {
			State   string `json:"state"`
			Summary struct {
				Total    int `json:"total"`
				Passed   int `json:"passed"`
				ExitCode int `json:"exit_code"`
			} `json:"summary"`
			Steps []struct {
				Name      string `json:"name"`
				CapsuleID string `json:"capsule_id"`
				State     string `json:"state"`
				Artifact  string `json:"artifact"`
			} `json:"steps"`
			Loops []struct {
				Rounds []struct {
					CapsuleIDs []string `json:"capsule_ids"`
				} `json:"rounds"`
			} `json:"loops"`
		}
		if name == "gated.json" {
			// Its release waits for a person: the decision is refused
			// until the draft completed and the gate holds the step.
			natstest.Eventually(t, 60*time.Second, 50*time.Millisecond, func() bool {
				code, _, _ := ctl("composition", "decide", doc.CompositionID, "release", "accept", "--by", "lead", "--reason", "read the draft")
				return code == cli.ExitOK
			}, "%s: the gated step was never decided", name)
		}
		natstest.Eventually(t, 60*time.Second, 50*time.Millisecond, func() bool {
			code, out, errOut := ctl("composition", "status", doc.CompositionID, "-o", "json")
			require.Equal(t, cli.ExitOK, code, errOut)
			require.NoError(t, json.Unmarshal([]byte(out), &st))
			return st.State != "running"
		}, "%s never ended", name)
		if st.State != "completed" {
			_, text, _ := ctl("composition", "status", doc.CompositionID)
			for _, s := range st.Steps {
				_, o, _ := ctl("status", s.CapsuleID)
				text += o
			}
			t.Fatalf("%s ended %s:\n%s", name, st.State, text)
		}
		require.Equal(t, len(doc.Steps), st.Summary.Total)
		require.Equal(t, len(doc.Steps), st.Summary.Passed)
		require.Zero(t, st.Summary.ExitCode)
		if name == "loop.json" {
			// Its check is scripted to reject round 1 (metadata.stub.rounds).
			require.Len(t, st.Loops, 1)
			require.Len(t, st.Loops[0].Rounds, 2)
		}
		var looped []string
		for _, l := range st.Loops {
			if len(l.Rounds) > 0 {
				looped = append(looped, l.Rounds[0].CapsuleIDs...)
			}
		}
		for i, s := range st.Steps {
			require.Equal(t, doc.Steps[i].Name, s.Name)
			// A verification loop's step is its last round's capsule;
			// compose named round 1's.
			if !slices.Contains(looped, res.Steps[i].CapsuleID) {
				require.Equal(t, res.Steps[i].CapsuleID, s.CapsuleID)
			}
			require.Equal(t, "completed", s.State, "%s: step %s", name, s.Name)
			require.NotEmpty(t, s.Artifact)
		}

		// The same document again is the run it made before.
		code, out, errOut = ctl("compose", path, "-o", "json")
		require.Equal(t, cli.ExitOK, code, errOut)
		var again cli.ComposeResult
		require.NoError(t, json.Unmarshal([]byte(out), &again))
		require.Equal(t, res, again)
	}
}
