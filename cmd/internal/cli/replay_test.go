package cli_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/capsuletest"
)

// TestOnlineReplay is the dead-letter workflow as a person runs it: a
// halted capsule shows in list --state halted; every refusal exits 5 and
// changes nothing; replay --capsule with the corrected capsule runs it
// again as run 2, which status shows.
func TestOnlineReplay(t *testing.T) {
	t.Parallel()
	o := setupOnline(t)
	doc := o.own(t, capsuletest.New().Stub(map[string]any{"fail": "worker out of disk"}))
	r := o.run(t, "publish", file(t, doc.Sealed(t)))
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	r = o.run(t, "wait", doc.ID(), "--timeout", "20s")
	require.Equal(t, cli.ExitFailure, r.code, "halted: %s", r.errOut)

	r = o.run(t, "list", "--state", "halted")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, doc.ID())
	r = o.run(t, "status", doc.ID(), "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	before := r.out

	other := o.own(t, capsuletest.New())
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"replay", "no-such-capsule"}, "no-such-capsule"},
		{[]string{"replay", doc.ID(), "--from-phase", "9"}, "out of range"},
		{[]string{"replay", doc.ID(), "--from-phase", "REVIEW"}, "it ended at EXECUTION (phase 4)"},
		{[]string{"replay", doc.ID(), "--from-phase", "0"}, "RECEPTION runs only on corrected bytes"},
		{[]string{"replay", doc.ID(), "--capsule", file(t, other.Sealed(t))}, "the corrected capsule's id is"},
		{[]string{"replay", doc.ID(), "--capsule", file(t, []byte(`{"capsule_id":`))}, "not a JSON object"},
		{[]string{"replay", doc.ID(), "--capsule", file(t, doc.Unsealed(t))}, "would halt at RECEPTION"},
		{[]string{"replay", doc.ID(), "--capsule", file(t, doc.Sealed(t)), "--from-phase", "2"}, "from RECEPTION"},
	} {
		r = o.run(t, tc.args...)
		require.Equal(t, cli.ExitRefused, r.code, "%v: %s", tc.args, r.errOut)
		require.Contains(t, r.errOut, tc.want, "%v", tc.args)
	}
	r = o.run(t, "status", doc.ID(), "-o", "json")
	require.Equal(t, before, r.out, "refused replays change nothing")

	// --dry-run: the same replay would meet the same failure (the stub's
	// script is in the bytes: the executor is called again), the
	// corrected one would not; neither changes anything.
	r = o.run(t, "replay", doc.ID(), "--dry-run")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, "dry run: nothing was changed")
	require.Regexp(t, `(?m)^\s+EXECUTION\s+stub\s+2\s+repeated$`, r.out)
	fixed := doc.Stub(map[string]any{}).Sealed(t)
	r = o.run(t, "replay", doc.ID(), "--dry-run", "--capsule", file(t, fixed), "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var preview adminsvc.ReplayPreviewReply
	require.NoError(t, json.Unmarshal([]byte(r.out), &preview))
	require.Nil(t, preview.WouldHalt)
	require.Equal(t, capsule.Reception, preview.From)
	require.Equal(t, 2, preview.Run)
	require.Len(t, preview.AgentCalls, 2)
	require.Contains(t, r.out, `"would_halt": null`)
	r = o.run(t, "replay", doc.ID(), "--dry-run", "--capsule", file(t, doc.Unsealed(t)), "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, `"would_halt": "schema_invalid:/integrity"`)
	r = o.run(t, "replay", doc.ID(), "--dry-run", "--from-phase", "REVIEW")
	require.Equal(t, cli.ExitRefused, r.code, "what replay refuses, --dry-run refuses: %s", r.out)
	r = o.run(t, "status", doc.ID(), "-o", "json")
	require.Equal(t, before, r.out, "a dry run changes nothing")

	r = o.run(t, "replay", doc.ID(), "--capsule", file(t, fixed), "--reason", "disk freed", "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var reply adminsvc.ReplayReply
	require.NoError(t, json.Unmarshal([]byte(r.out), &reply))
	require.Equal(t, 2, reply.Capsule.Run)
	require.Empty(t, reply.Dependents)

	r = o.run(t, "wait", doc.ID(), "--timeout", "20s", "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var s client.Status
	require.NoError(t, json.Unmarshal([]byte(r.out), &s))
	require.Equal(t, capsule.Completed, s.State)
	require.Equal(t, 2, s.Run)

	r = o.run(t, "status", doc.ID())
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Regexp(t, `(?m)^run:\s+2$`, r.out)
	require.Contains(t, r.out, "AT")
	require.True(t, strings.Contains(r.out, "replayed") && strings.Contains(r.out, "disk freed"), r.out)

	r = o.run(t, "history", doc.ID(), "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var events []capsule.Event
	require.NoError(t, json.Unmarshal([]byte(r.out), &events))
	var kinds []capsule.EventKind
	for _, e := range events {
		kinds = append(kinds, e.Kind)
	}
	require.Equal(t, capsule.EventCompleted, kinds[len(kinds)-1], "the replay comes before the run it started: %v", kinds)
	require.Less(t, slices.Index(kinds, capsule.EventHalted), slices.Index(kinds, capsule.EventReplayed), "%v", kinds)

	r = o.run(t, "replay", doc.ID())
	require.Equal(t, cli.ExitRefused, r.code, "a completed capsule: %s", r.errOut)
	require.Contains(t, r.errOut, "it completed")
}
