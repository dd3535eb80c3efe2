package corrupt

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReportOnce: a value met again and again is logged and counted once;
// another value (or the same key at another revision) once more; errors
// that are no corruption are not reported.
func TestReportOnce(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	var mu sync.Mutex
	counts := map[string]int{}
	r := NewReporter(slog.New(slog.NewTextHandler(&buf, nil)), func(b string) { mu.Lock(); counts[b]++; mu.Unlock() })
	e := fmt.Errorf("load: %w", New(Checkpoints, "k", 5, errors.New("not JSON")))
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() { defer wg.Done(); require.True(t, r.Report(e, "halts")) }()
	}
	wg.Wait()
	require.True(t, r.Report(New(Checkpoints, "k", 6, errors.New("x")), "halts"))
	require.True(t, r.Report(New("ELSEWHERE", "k", 1, errors.New("x")), "halts"))
	require.False(t, r.Report(errors.New("timeout"), "halts"))
	require.False(t, r.Report(nil, "halts"))
	require.Equal(t, map[string]int{Checkpoints: 2, "other": 1}, counts)
	require.Equal(t, 3, strings.Count(buf.String(), "level=ERROR"))
	require.ErrorIs(t, e, ErrCorrupt)
	var nilR *Reporter
	require.True(t, nilR.Report(e, "halts"))
}
