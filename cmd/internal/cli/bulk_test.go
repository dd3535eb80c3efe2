package cli_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/capsuletest"
)

// runIn runs sagactl against the fixture's server with stdin (never a
// terminal).
func (o *online) runIn(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.MainInput(append([]string{"--nats-url", o.url}, args...), strings.NewReader(stdin), &out, &errOut)
	return result{code: code, out: out.String(), errOut: errOut.String()}
}

func (o *online) status(t *testing.T, id string) client.Status {
	t.Helper()
	r := o.run(t, "status", id, "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var s client.Status
	require.NoError(t, json.Unmarshal([]byte(r.out), &s))
	return s
}

// TestBulk: bulk selects with list's filters or ids on stdin, previews
// with --dry-run (a replay's would-halt from sagad's preview), refuses to
// act without a terminal unless --yes, and reports each capsule with an
// exit code that says whether all succeeded.
func TestBulk(t *testing.T) {
	t.Parallel()
	o := setupOnline(t)
	failed := o.own(t, capsuletest.New().Stub(map[string]any{"fail": "worker out of disk"}))
	missing := capsuletest.New().Set("target", "file:missing-"+capsuletest.NewID()+".txt")
	done := o.own(t, capsuletest.New())
	for _, d := range []capsuletest.Doc{failed, missing, done} {
		r := o.run(t, "publish", file(t, d.Sealed(t)))
		require.Equal(t, cli.ExitOK, r.code, r.errOut)
		o.run(t, "wait", d.ID(), "--timeout", "20s")
	}
	require.Equal(t, capsule.Halted, o.status(t, failed.ID()).State)
	require.Equal(t, capsule.Halted, o.status(t, missing.ID()).State)

	// list has the filters bulk selects with.
	r := o.run(t, "list", "--halt-reason", "target_missing")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, missing.ID())
	require.NotContains(t, r.out, failed.ID())
	r = o.run(t, "list", "--since", "nonsense")
	require.Equal(t, cli.ExitUsage, r.code)

	r = o.runIn(t, "", "bulk", "replay", "--state", "halted", "--dry-run")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Regexp(t, `(?m)^CAPSULE\s+STATE\s+OK\s+RESULT\s+WOULD_HALT\s+ERROR$`, r.out)
	require.Regexp(t, `(?m)^`+missing.ID()[:8]+`\S*\s+halted\s+yes\s+would run 2 from REALITY_ANCHOR\s+target_missing:`, r.out)
	require.Regexp(t, `(?m)^`+failed.ID()[:8]+`\S*\s+halted\s+yes\s+would run 2 from EXECUTION\s+-\s+-$`, r.out)
	require.Contains(t, r.out, "dry run: nothing was changed (2 capsules; 1 would halt again)")
	r = o.runIn(t, "", "bulk", "cancel", "--state", "halted", "--dry-run")
	require.Equal(t, cli.ExitFailure, r.code, "nothing to cancel: %s", r.out)
	require.Contains(t, r.out, "would be refused")
	require.Equal(t, 1, o.status(t, failed.ID()).Run, "a dry run changes nothing")

	r = o.runIn(t, "", "bulk", "replay", "--state", "halted")
	require.Equal(t, cli.ExitUsage, r.code, r.out)
	require.Contains(t, r.errOut, "no terminal to confirm on")
	r = o.runIn(t, failed.ID()+"\n", "bulk", "replay")
	require.Equal(t, cli.ExitUsage, r.code, "ids on stdin, no --yes: %s", r.out)
	r = o.runIn(t, "", "bulk", "cancel", "--wave", "no-such-wave", "--yes")
	require.Equal(t, cli.ExitRefused, r.code, "an empty selection")
	require.Equal(t, 1, o.status(t, failed.ID()).Run, "refused: nothing done")

	// Ids on stdin, one unknown: the rest is done, the exit says not all.
	r = o.runIn(t, failed.ID()+" # the disk is freed\nno-such-capsule\n", "bulk", "replay", "--yes", "--reason", "disk freed", "-o", "json")
	require.Equal(t, cli.ExitFailure, r.code, r.errOut)
	var results []cli.BulkResult
	require.NoError(t, json.Unmarshal([]byte(r.out), &results))
	require.Len(t, results, 2)
	require.True(t, results[0].OK, results[0].Error)
	require.Equal(t, failed.ID(), results[0].CapsuleID)
	require.Equal(t, "run 2 in_progress", results[0].Result)
	require.False(t, results[1].OK)
	require.Equal(t, "not found", results[1].Error)
	require.Equal(t, 2, o.status(t, failed.ID()).Run)

	r = o.runIn(t, "", "bulk", "cancel", "--halt-reason", "target_missing", "--yes")
	require.Equal(t, cli.ExitFailure, r.code, "a halted capsule is not cancelled: %s", r.out)
	require.Regexp(t, `(?m)^`+missing.ID()[:8]+`\S*\s+halted\s+no\s+-\s+cannot cancel`, r.out)
}
