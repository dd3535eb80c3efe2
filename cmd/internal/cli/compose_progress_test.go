package cli_test

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/cmd/internal/cli"
)

// ttyBuffer stands for a person's terminal.
type ttyBuffer struct{ bytes.Buffer }

func (*ttyBuffer) IsTerminal() bool { return true }

// TestOnlineComposeProgress: on a terminal, sagactl compose tells on
// stderr how many steps sagad has published, one line rewritten in place
// and ended before the steps are printed; with -o json, or when stderr is
// not a terminal, it says nothing; the same document again starts no new
// run and shows no progress.
func TestOnlineComposeProgress(t *testing.T) {
	t.Parallel()
	o := startChainOnline(t, &recorder{inputs: map[string][]capsule.Artifact{}})
	compose := func(errOut io.Writer, doc string, args ...string) (int, string) {
		t.Helper()
		var out bytes.Buffer
		code := cli.Main(append([]string{"--nats-url", o.url, "compose", doc}, args...), &out, errOut)
		return code, out.String()
	}
	doc := file(t, compositionDoc(t, o.workspace, "progress", ""))

	tty := &ttyBuffer{}
	code, out := compose(tty, doc)
	require.Equal(t, cli.ExitOK, code, tty.String())
	require.Contains(t, out, "composition progress run 1")
	lines := strings.Split(strings.TrimSuffix(tty.String(), "\n"), "\n")
	require.Len(t, lines, 1, "one line, ended: %q", tty.String())
	last := lines[0][strings.LastIndex(lines[0], "\r")+1:]
	require.Equal(t, "composition progress run 1: published 4/4 steps", last)

	tty.Reset()
	code, _ = compose(tty, doc)
	require.Equal(t, cli.ExitOK, code, tty.String())
	require.Empty(t, tty.String(), "the same document again publishes nothing new")

	var plain bytes.Buffer
	code, _ = compose(&plain, file(t, compositionDoc(t, o.workspace, "quiet", "")))
	require.Equal(t, cli.ExitOK, code, plain.String())
	require.NotContains(t, plain.String(), "published", "stderr is not a terminal")

	tty.Reset()
	code, _ = compose(tty, file(t, compositionDoc(t, o.workspace, "json", "")), "-o", "json")
	require.Equal(t, cli.ExitOK, code, tty.String())
	require.NotContains(t, tty.String(), "published", "-o json")
}
