package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/capsuletest"
)

func TestReportCompleted(t *testing.T) {
	t.Parallel()
	f := obsSetup(t)
	doc := capsuletest.New()
	s := f.publish(t, doc)
	require.Equal(t, capsule.Completed, s.State, s.HaltReason)
	require.NotEmpty(t, s.ArtifactRefs)

	r := f.run("report", doc.ID())
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	md := r.out
	require.True(t, strings.HasPrefix(md, "# Capsule report: `"+doc.ID()+"`\n"), md)
	for _, section := range []string{"## Summary", "## Phases", "## Cycles and reviews", "## Rule findings",
		"## Budget", "## Locks", "## Continuations", "## Artifacts", "## Timeline", "## Outcome"} {
		require.Contains(t, md, "\n"+section+"\n")
	}
	require.Contains(t, md, "| Outcome | **completed** |")
	require.Contains(t, md, "| Title | Touch the README |")
	require.Contains(t, md, "| Cycles used | 1 of 3 |")
	for p := capsule.Phase(0); p < capsule.NumPhases; p++ {
		require.Regexp(t, `\n\| `+strconv.Itoa(int(p))+` `+p.String()+` \| [01] \| [0-9-]+ [0-9:.]+Z \| [0-9-]+ [0-9:.]+Z \| [0-9.]+[µnm]?s \| (passed|completed) \|`, md,
			"phase %s has a row with start, end and duration", p)
	}
	require.Contains(t, md, "### Cycle 1: APPROVED")
	require.Contains(t, md, "- `"+s.ArtifactRefs[0]+"`")
	require.Contains(t, md, "Required: `README.md`.")
	require.Contains(t, md, "Held now: none.")
	require.Contains(t, md, "Current: none.")
	require.Contains(t, md, "| Used | ")
	require.Contains(t, md, "| Cap | 10000 | $5.0000 |")
	require.Contains(t, md, "| phase_started |")
	require.Contains(t, md, "\nCompleted at ")

	// -f writes the same report to a file.
	path := filepath.Join(t.TempDir(), "report.md")
	r = f.run("report", doc.ID(), "-f", path)
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Empty(t, r.out)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, md, string(b))

	// -o json: the records the report is built from.
	r = f.run("report", doc.ID(), "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var data cli.ReportData
	require.NoError(t, json.Unmarshal([]byte(r.out), &data))
	require.Equal(t, doc.ID(), data.Checkpoint.CapsuleID)
	require.NotNil(t, data.Capsule)
	require.GreaterOrEqual(t, len(data.Events), 15)
	require.Nil(t, data.Continuation)
}

func TestReportHaltedWithRuleFindings(t *testing.T) {
	t.Parallel()
	f := obsSetup(t)
	doc := capsuletest.New().Set("constraints.destructive", true) // Rule 11: no operator gate
	s := f.publish(t, doc)
	require.Equal(t, capsule.Halted, s.State)

	r := f.run("report", doc.ID())
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, "| Outcome | **halted**: `absolute_rules_violated:[11]` |")
	require.Contains(t, r.out, "| 11 | Human gate for destructive work | ")
	require.Contains(t, r.out, "No review recorded.")
	require.Contains(t, r.out, "\n## Artifacts\n\nNone.\n")
	require.Contains(t, r.out, "Halted at AUTOMATED_GATES (cycle 0)")
}

func TestReportNotFound(t *testing.T) {
	t.Parallel()
	f := obsSetup(t)
	path := filepath.Join(t.TempDir(), "report.md")
	r := f.run("report", capsuletest.NewID(), "-f", path)
	require.Equal(t, cli.ExitNotFound, r.code, r.errOut)
	require.NoFileExists(t, path, "no empty report for a capsule that does not exist")
}
