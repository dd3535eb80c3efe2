package cli_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
)

// lockedBuffer is a bytes.Buffer a test reads while a command writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestOnlineListWatch: list --watch prints the list (empty: its header),
// then a capsule published meanwhile as a row each time its row changes,
// until its context ends, which is no error (issue 35).
func TestOnlineListWatch(t *testing.T) {
	t.Parallel()
	o := setupOnline(t)
	var out, errOut lockedBuffer
	root := cli.NewRoot(&out, &errOut)
	root.SetArgs([]string{"--nats-url", o.url, "list", "--watch"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	t.Cleanup(cancel)

	natstest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		return strings.HasPrefix(out.String(), "CAPSULE_ID")
	}, "the header first")
	doc := o.own(t, capsuletest.New())
	r := o.run(t, "publish", file(t, doc.Sealed(t)))
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	natstest.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
		return strings.Contains(out.String(), "completed")
	}, "the capsule's row as it completes: %s", stringerFunc(out.String))
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("list --watch did not end with its context")
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Equal(t, 1, strings.Count(out.String(), "CAPSULE_ID"), "one header: %s", out.String())
	// The stub executors may finish it within one interval: a row for
	// each state seen, the last one completed.
	require.GreaterOrEqual(t, len(lines), 2, "the header, then the capsule's rows: %s", out.String())
	for _, l := range lines[1:] {
		require.True(t, strings.HasPrefix(l, doc.ID()), l)
	}
	require.Contains(t, lines[len(lines)-1], "completed")
	require.Empty(t, errOut.String())
}

type stringerFunc func() string

func (f stringerFunc) String() string { return f() }
