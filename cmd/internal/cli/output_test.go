package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
)

func TestNewestFirst(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	mk := func(id string, at time.Duration) client.Status {
		return client.Status{CapsuleID: id, UpdatedAt: t0.Add(at)}
	}
	ids := func(l []client.Status) []string {
		out := []string{}
		for _, s := range l {
			out = append(out, s.CapsuleID)
		}
		return out
	}
	tests := []struct {
		name  string
		limit int
		want  []string
	}{
		{"all", 0, []string{"c", "a", "b", "d"}},
		{"limit", 2, []string{"c", "a"}},
		{"limit past the end", 10, []string{"c", "a", "b", "d"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			list := []client.Status{mk("d", 0), mk("b", time.Minute), mk("c", time.Hour), mk("a", time.Minute)}
			require.Equal(t, tt.want, ids(newestFirst(list, tt.limit)))
		})
	}
}

func TestAge(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		ago  time.Duration
		want string
	}{
		{0, "0s"}, {1500 * time.Millisecond, "1s"}, {-time.Minute, "0s"}, {90 * time.Second, "1m30s"},
		{3*time.Hour + 5*time.Minute + 7*time.Second, "3h5m"}, {50 * time.Hour, "2d2h"},
	} {
		require.Equal(t, tt.want, age(now, now.Add(-tt.ago)), "%s ago", tt.ago)
	}
	require.Equal(t, "-", age(now, time.Time{}))
}

// TestListFits120Columns fills every column of the default table to its
// longest and checks no line passes 120 characters, while -o wide keeps
// the whole reason.
func TestListFits120Columns(t *testing.T) {
	t.Parallel()
	now := time.Now()
	long := "executor_failed:" + strings.Repeat("the model said no ", 10)
	list := []client.Status{{
		CapsuleID: "5a6a0000-0000-4000-8000-000000000000", Key: "5a6a0000-0000-4000-8000-000000000000",
		State: capsule.WaitingForOperator, Phase: 3, PhaseName: "AUTOMATED_GATES", CyclesUsed: 12345,
		HaltReason: long, UpdatedAt: now.Add(-99*24*time.Hour - time.Hour),
	}}
	var b bytes.Buffer
	require.NoError(t, printList(table(&b), list, false, now))
	for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		require.LessOrEqual(t, utf8.RuneCountInString(l), listWidth, "%q", l)
	}
	require.Contains(t, b.String(), "…")
	require.Regexp(t, `^CAPSULE_ID\s+STATE\s+PHASE\s+CYCLES\s+AGE\s+REASON\n`, b.String())

	b.Reset()
	require.NoError(t, printList(table(&b), list, true, now))
	require.Contains(t, b.String(), long)
	require.Regexp(t, `^CAPSULE_ID\s+KEY\s+STATE\s+PHASE\s+CYCLES\s+PROGRESS\s+UPDATED_AT\s+HALT_REASON\n`, b.String())
}

// TestWriteYAML: the keys are the JSON names in the JSON order, strings
// that look like other types stay strings, empty collections stay empty.
func TestWriteYAML(t *testing.T) {
	t.Parallel()
	v := struct {
		CapsuleID string         `json:"capsule_id"`
		Count     int            `json:"count"`
		Looks     string         `json:"looks_numeric"`
		Yes       string         `json:"yes"`
		Empty     []string       `json:"empty"`
		Map       map[string]any `json:"map"`
		Skipped   string         `json:"skipped,omitempty"`
		At        time.Time      `json:"at"`
	}{CapsuleID: "abc", Count: 3, Looks: "123", Yes: "true", Empty: []string{}, Map: map[string]any{"k": []int{1, 2}},
		At: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	var b bytes.Buffer
	require.NoError(t, writeYAML(&b, v))
	require.Equal(t, `capsule_id: abc
count: 3
looks_numeric: "123"
yes: "true"
empty: []
map:
  k:
    - 1
    - 2
at: "2026-11-23T12:00:00Z"
`, b.String())
	var back map[string]any
	require.NoError(t, yaml.Unmarshal(b.Bytes(), &back))
	require.Equal(t, "123", back["looks_numeric"])
	require.Equal(t, "true", back["yes"])
}
