package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCountCalls(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) string { return fmt.Sprint(t0.Add(time.Duration(s) * time.Second).UnixNano()) }
	kill := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tests := []struct {
		name        string
		lines       []string
		kills       []time.Time
		crash, live int
		pairs       int
	}{
		{"once each", []string{"a 1 " + at(1), "a 2 " + at(2), "b 1 " + at(3)}, nil, 0, 0, 3},
		{"repeat after a kill", []string{"a 1 " + at(1), "a 1 " + at(5)}, []time.Time{kill(3)}, 1, 0, 1},
		{"repeat by a live sagad", []string{"a 1 " + at(1), "a 1 " + at(5)}, []time.Time{kill(6)}, 0, 1, 1},
		{"out of order lines", []string{"a 1 " + at(5), "a 1 " + at(1), "a 1 " + at(9)}, []time.Time{kill(3)}, 1, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "calls.log")
			require.NoError(t, os.WriteFile(path, []byte(strings.Join(tt.lines, "\n")+"\n"), 0o644))
			var r Result
			require.NoError(t, countCalls(path, tt.kills, &r))
			require.Equal(t, len(tt.lines), r.Calls)
			require.Equal(t, tt.pairs, r.Pairs)
			require.Equal(t, tt.crash, r.CrashRepeats)
			require.Equal(t, tt.live, r.LiveRepeats)
		})
	}
}

func TestResultOK(t *testing.T) {
	ok := Result{Published: 10, Terminal: 10, CrashRepeats: 3}
	require.True(t, ok.OK())
	for _, bad := range []Result{
		{Published: 10, Lost: 1}, {Published: 10, Stuck: 1}, {Published: 10, Duplicated: 1},
		{Published: 10, LiveRepeats: 1}, {Published: 0}, {Published: 10, Err: errGaveUp},
	} {
		require.False(t, bad.OK(), "%+v", bad)
	}
}
