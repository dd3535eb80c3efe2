package schemas

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// schemaPatterns returns every pattern in the capsule schema.
func schemaPatterns(t *testing.T) []string {
	raw, err := os.ReadFile("capsule.schema.json")
	require.NoError(t, err)
	var doc any
	require.NoError(t, json.Unmarshal(raw, &doc))
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if p, ok := e.(string); ok && k == "pattern" {
					out = append(out, p)
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(doc)
	require.NotEmpty(t, out)
	return out
}

// TestClassPatternAgrees holds classPattern to regexp on every pattern of
// the capsule schema (each must compile to one, so the fast check never
// runs regexp on a valid capsule) and on other shapes it takes, over
// strings built to match each branch, one edit away from those, and drawn
// from each class's edges (either side of every range), other scripts and
// invalid UTF-8.
func TestClassPatternAgrees(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 8))
	extra := []string{`^$`, `^[^x]+x$`, `^a{2,}b+$`, `^(?:ab|[cd]{2}|e?)$`, `^[a-c]{0,3}-[0-9]$`, `^é+😀{1,2}$`, `^\d+$`, `^[\p{Greek}]{1,3}$`}
	for _, expr := range append(schemaPatterns(t), extra...) {
		p := compileClassPattern(expr)
		require.NotNil(t, p, "not compiled: %s", expr)
		re := regexp.MustCompile(expr)
		matched := 0
		for _, s := range patternInputs(r, p) {
			want := re.MatchString(s)
			require.Equal(t, want, p.match(s), "%s on %q", expr, s)
			if want {
				matched++
			}
		}
		require.Positive(t, matched, expr)
	}
}

// TestClassPatternRefuses: shapes where a greedy piece could have to give
// back a rune, or that are not classes, are left to regexp.
func TestClassPatternRefuses(t *testing.T) {
	t.Parallel()
	for _, expr := range []string{
		`^a*a$`, `^a{2,}b*$`, `^[ab]+b$`, `^[0-9]+[5-9]$`, `^a?b?a$`, `^(a)$`, `^(?i)a$`, `a+`, `^a+`, `^a+?$`,
		`^(?:ab)+$`, `^a|b$`, `^.+$`, `^\bx$`, `^(?:a|)$`, `[`,
	} {
		require.Nil(t, compileClassPattern(expr), expr)
	}
}

// patternInputs builds strings for p: matching ones, each edited once, and
// random ones over the classes' edges.
func patternInputs(r *rand.Rand, p *classPattern) []string {
	edges := []rune{' ', '-', '.', '_', 'é', '😀', utf8.RuneError, 0x10FFFF, '\n', 0}
	for _, b := range p.branches {
		for _, piece := range b {
			for i := 0; i+1 < len(piece.ranges); i += 2 {
				edges = append(edges, piece.ranges[i]-1, piece.ranges[i], piece.ranges[i+1], piece.ranges[i+1]+1)
			}
		}
	}
	randRune := func() string {
		if r.IntN(20) == 0 {
			return "\xff" // invalid UTF-8: regexp reads U+FFFD
		}
		e := edges[r.IntN(len(edges))]
		if !utf8.ValidRune(e) {
			e = 'z'
		}
		return string(e)
	}
	var out []string
	for range 300 {
		b := p.branches[r.IntN(len(p.branches))]
		s := buildMatch(r, b)
		out = append(out, s, editOnce(r, s, randRune))
		var rnd strings.Builder
		for n := r.IntN(70); n > 0; n-- {
			rnd.WriteString(randRune())
		}
		out = append(out, rnd.String())
	}
	return out
}

// buildMatch writes a string the pieces match.
func buildMatch(r *rand.Rand, pieces []classPiece) string {
	var b strings.Builder
	for _, piece := range pieces {
		n := piece.min + r.IntN(3)
		if piece.max >= 0 && n > piece.max {
			n = piece.max
		}
		for range n {
			k := 2 * r.IntN(len(piece.ranges)/2)
			lo, hi := piece.ranges[k], piece.ranges[k+1]
			c := lo + rune(r.Int64N(int64(hi-lo)+1))
			if !utf8.ValidRune(c) {
				c = lo
			}
			b.WriteRune(c)
		}
	}
	return b.String()
}

// editOnce deletes, replaces or inserts one rune, or cuts s short.
func editOnce(r *rand.Rand, s string, randRune func() string) string {
	runes := []string{}
	for _, c := range s {
		runes = append(runes, string(c))
	}
	at := r.IntN(len(runes) + 1)
	switch r.IntN(4) {
	case 0:
		if at < len(runes) {
			runes = append(runes[:at], runes[at+1:]...)
		}
	case 1:
		if at < len(runes) {
			runes[at] = randRune()
		}
	case 2:
		runes = append(runes[:at], append([]string{randRune()}, runes[at:]...)...)
	default:
		runes = runes[:at]
	}
	return strings.Join(runes, "")
}
