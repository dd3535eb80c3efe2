package rules

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWithinFoldIndexAsWithinFold holds Rule 6's one-clean search to
// slices.IndexFunc over WithinFold: 30,000 children against lists of up to
// five parents, made of segments that clean away ("." "..", "//", a
// trailing '/'), differ in case only, or share a prefix without a segment.
func TestWithinFoldIndexAsWithinFold(t *testing.T) {
	t.Parallel()
	segs := []string{"src", "SRC", "Src", "srcx", ".git", ".GIT", ".env", "secrets", "Secrets", ".", "..", "", "a", "A", "ǅ", "K", "\u212a"}
	r := rand.New(rand.NewPCG(41, 43))
	randPath := func() string {
		parts := make([]string, r.IntN(4))
		for i := range parts {
			parts[i] = segs[r.IntN(len(segs))]
		}
		p := strings.Join(parts, "/")
		switch r.IntN(5) {
		case 0:
			p = "/" + p
		case 1:
			p += "/"
		case 2:
			p = "./" + p
		}
		return p
	}
	for range 30000 {
		parents := make([]string, r.IntN(6))
		for i := range parents {
			parents[i] = randPath()
		}
		child := randPath()
		want := slices.IndexFunc(parents, func(p string) bool { return WithinFold(p, child) })
		if got := withinFoldIndex(parents, child); got != want {
			t.Fatalf("withinFoldIndex(%q, %q) = %d, WithinFold finds %d", parents, child, got, want)
		}
	}
}

// TestDefaultedAsWithDefaults: the config Evaluate hands the checks holds
// the values WithDefaults gives, for unset, empty and set lists.
func TestDefaultedAsWithDefaults(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{
		{},
		{DenyPaths: []string{}, DestructiveKinds: []string{}, AgentRegistry: []string{}, AllowedHosts: []string{}, SupportedMajors: []int{}},
		{DenyPaths: []string{"x"}, SupportedMajors: []int{1, 2}, ExecutorKinds: []string{"k"}, ReviewerIDs: []string{"r"},
			AllowedSchemes: []string{"file"}, AgentRegistry: []string{"a"}, AllowedHosts: []string{"h"}, MaxLocks: 3, Horizon: 5},
	} {
		require.Equal(t, c.WithDefaults(), c.defaulted())
	}
}
