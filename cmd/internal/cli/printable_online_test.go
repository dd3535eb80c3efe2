package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
)

// evil is capsule text that would clear the screen, retitle the terminal,
// reverse the text after it and forge a table row, were it printed raw.
const evil = "\x1b[2J\x1b]0;pwned\x07\u202eevil\nforged\trow"

// requireEscaped: out shows evil escaped, and nothing of it raw.
func requireEscaped(t *testing.T, what, out string) {
	t.Helper()
	for _, raw := range []string{"\x1b", "\x07", "\u202e", "evil\nforged", "forged\trow"} {
		require.NotContains(t, out, raw, "%s prints %q raw:\n%s", what, raw, out)
	}
	require.Contains(t, out, `\x1b[2J\x1b]0;pwned\a\u202eevil\nforged\trow`, "%s:\n%s", what, out)
}

// TestReadCommandsEscapeControlCharacters: capsule data with escape
// sequences, bidi overrides, newlines and tabs reaches every read command's
// table or text escaped, and -o json intact.
func TestReadCommandsEscapeControlCharacters(t *testing.T) {
	t.Parallel()
	f := obsSetup(t)
	doc := capsuletest.New().Set("task.title", evil).Stub(map[string]any{"fail": evil})
	s := f.publish(t, doc)
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, "executor_failed:"+evil, s.HaltReason)

	for _, args := range [][]string{
		{"status", doc.ID()},
		{"list", "-o", "wide"}, // the default table cuts the reason
		{"list", "--state", "halted", "-o", "wide"},
		{"history", doc.ID()},
		{"report", doc.ID()},
		{"watch", doc.ID(), "--since", "1h", "--timeout", "2s"},
	} {
		r := f.run(args...)
		require.Equal(t, cli.ExitOK, r.code, "%v: %s", args, r.errOut)
		requireEscaped(t, strings.Join(args, " "), r.out)
	}
	r := f.run("list")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.NotContains(t, r.out, "\x1b", "list cuts the reason after escaping it")
	r = f.run("status", doc.ID(), "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, `\u001b[2J\u001b]0;pwned\u0007`+"\u202e"+`evil\nforged\trow`, "-o json keeps the data, JSON-escaped")

	// pending and a pause reason: park a capsule where EXECUTION is not
	// consumed, then pause it with the evil reason.
	r = f.run("phase", "pause", "4")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	held := capsuletest.New().Set("target", "file:go.mod").Set("constraints.resource_locks_required", []any{"go.mod"})
	ctx := context.Background()
	_, err := f.client.Publish(ctx, held.Sealed(t), "")
	require.NoError(t, err)
	// Its step waits at EXECUTION (the checkpoint shows PLANNING until
	// EXECUTION's claim writes the deferred advances).
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		r := f.run("phase", "list", "-o", "json")
		var phases []admin.PhaseState
		return r.code == cli.ExitOK && json.Unmarshal([]byte(r.out), &phases) == nil && phases[capsule.Execution].Pending == 1
	}, "capsule never reached EXECUTION")
	// sagad's admin service refuses an operator name with control
	// characters; a reason may carry anything and is escaped on output.
	r = f.run("pause", held.ID(), "--reason", evil, "--by", evil)
	require.Equal(t, cli.ExitUsage, r.code, r.errOut)
	require.NotContains(t, r.errOut, "\x1b[2J")
	r = f.run("pause", held.ID(), "--reason", evil, "--by", "mallory")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.NotContains(t, r.out, "\x1b")
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		r = f.run("pending")
		return r.code == cli.ExitOK && strings.Contains(r.out, held.ID())
	}, "the paused capsule is not pending")
	requireEscaped(t, "pending", r.out)
	r = f.run("report", held.ID())
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	requireEscaped(t, "report of a paused capsule", r.out)
}
