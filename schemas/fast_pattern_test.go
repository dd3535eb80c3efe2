package schemas

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/differential"
)

// schemaPatterns returns every pattern in the capsule schema.
func schemaPatterns(t testing.TB) []string {
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

// patternCase is a string to match against a pattern.
type patternCase struct{ expr, s string }

// extraPatterns are shapes classPattern takes besides the schema's.
var extraPatterns = []string{`^$`, `^[^x]+x$`, `^a{2,}b+$`, `^(?:ab|[cd]{2}|e?)$`, `^[a-c]{0,3}-[0-9]$`, `^é+😀{1,2}$`, `^\d+$`, `^[\p{Greek}]{1,3}$`}

// allPatterns are the schema's patterns and extraPatterns.
var allPatterns = sync.OnceValue(func() []string {
	var ps []string
	raw, err := os.ReadFile("capsule.schema.json")
	var doc any
	if err == nil && json.Unmarshal(raw, &doc) == nil {
		ps = collectPatterns(doc, ps)
	}
	return append(ps, extraPatterns...)
})

func collectPatterns(v any, out []string) []string {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if p, ok := e.(string); ok && k == "pattern" {
				out = append(out, p)
			}
			out = collectPatterns(e, out)
		}
	case []any:
		for _, e := range x {
			out = collectPatterns(e, out)
		}
	}
	return out
}

// compiledRegexps caches the reference's compilations.
var compiledRegexps sync.Map

// classPatternPair holds classPattern to regexp on every pattern of the
// capsule schema (each must compile to one, so the fast check never runs
// regexp on a valid capsule) and on other shapes it takes, over strings
// built to match each branch, one edit away from those, and drawn from
// each class's edges (either side of every range), other scripts and
// invalid UTF-8.
var classPatternPair = differential.Pair[patternCase, bool]{
	Name: "ClassPattern",
	Fast: func(c patternCase) (bool, error) {
		p := compileClassPattern(c.expr)
		if p == nil {
			return false, fmt.Errorf("not compiled: %s", c.expr)
		}
		return p.match(c.s), nil
	},
	Reference: func(c patternCase) (bool, error) {
		re, ok := compiledRegexps.Load(c.expr)
		if !ok {
			re, _ = compiledRegexps.LoadOrStore(c.expr, regexp.MustCompile(c.expr))
		}
		return re.(*regexp.Regexp).MatchString(c.s), nil
	},
	Seeds: func() (out []patternCase) {
		r := rand.New(rand.NewPCG(5, 8))
		for _, expr := range allPatterns() {
			if p := compileClassPattern(expr); p != nil {
				for _, s := range patternInputs(r, p) {
					out = append(out, patternCase{expr, s})
				}
			}
		}
		return out
	}(),
	// A pattern's index, then the string.
	Decode: func(b []byte) (patternCase, bool) {
		ps := allPatterns()
		if len(b) == 0 || len(ps) == 0 {
			return patternCase{}, false
		}
		return patternCase{ps[int(b[0])%len(ps)], string(b[1:])}, true
	},
	Encode: func(c patternCase) []byte {
		i := slices.Index(allPatterns(), c.expr)
		return append([]byte{byte(i)}, c.s...)
	},
}

// FuzzClassPattern runs classPatternPair on the fuzzer's strings.
func FuzzClassPattern(f *testing.F) { differential.Fuzz(f, classPatternPair) }

// TestClassPatternsCompile: every pattern of the schema, and each extra
// shape, compiles to a class pattern, and its seeds match it somewhere
// (so the pair's agreement covers matches as well as misses).
func TestClassPatternsCompile(t *testing.T) {
	t.Parallel()
	require.NotEmpty(t, schemaPatterns(t))
	require.Equal(t, len(schemaPatterns(t))+len(extraPatterns), len(allPatterns()))
	matched := map[string]int{}
	for _, c := range classPatternPair.Seeds {
		if ok, _ := classPatternPair.Reference(c); ok {
			matched[c.expr]++
		}
	}
	for _, expr := range allPatterns() {
		require.NotNil(t, compileClassPattern(expr), "not compiled: %s", expr)
		require.Positive(t, matched[expr], expr)
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
