package rules

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/differential"
)

// This package's fast paths, each held to the routine it replaces by the
// shared harness (internal/differential).
func TestDifferential(t *testing.T) {
	t.Parallel()
	differential.RunAll(t, differential.Registry{walkStringsPair, spanWalkPair, spanWalkBytesPair, secretsPair})
}

func FuzzWalkStringsMatchesTokenWalk(f *testing.F)  { differential.Fuzz(f, walkStringsPair) }
func FuzzSpanWalkMatchesWalkJSON(f *testing.F)      { differential.Fuzz(f, spanWalkPair) }
func FuzzSpanWalkBytesMatchesWalkJSON(f *testing.F) { differential.Fuzz(f, spanWalkBytesPair) }
func FuzzSecrets(f *testing.F)                      { differential.Fuzz(f, secretsPair) }

// exampleCapsules are the files of examples/capsules, the corpus both
// walks start from.
var exampleCapsules = sync.OnceValue(func() [][]byte {
	files, _ := filepath.Glob("../examples/capsules/*")
	var out [][]byte
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil {
			out = append(out, b)
		}
	}
	return out
})

func TestExampleCapsulesFound(t *testing.T) {
	t.Parallel()
	require.NotEmpty(t, exampleCapsules(), "the example capsules are the corpus")
}

func bytesInput(b []byte) ([]byte, bool) { return b, true }
func bytesOutput(b []byte) []byte        { return b }

// walkStringsPair: on valid documents the walk sees what the
// encoding/json token walk saw, field paths included; on broken ones both
// fail (Rule 9 then scans the bytes as text). Inputs: the example
// capsules, each with a byte replaced by one that steers the walk.
var walkStringsPair = differential.Pair[[]byte, []visit]{
	Name:      "WalkStrings",
	Fast:      func(raw []byte) ([]visit, error) { return visits(walkStrings, raw) },
	Reference: func(raw []byte) ([]visit, error) { return visits(walkStringsTokens, raw) },
	Seeds: append(exampleCapsules(),
		[]byte(`{"a":{"b c":["x",{"password":"p","k":1}],"a":"dup"},"token":"ghp_0123456789abcdefghijABCDEFGHIJ012345"}`),
		[]byte(`{"a":["x",{"b":"y"}],"c":1}`)),
	Generate: func(r *rand.Rand) []byte {
		ex := exampleCapsules()
		bad := append([]byte(nil), ex[r.IntN(len(ex))]...)
		bad[r.IntN(len(bad))] = `{}[],:"\ x0`[r.IntN(11)]
		return bad
	},
	Count:  200 * 31, // as many as 200 per example capsule
	Decode: bytesInput,
	Encode: bytesOutput,
}

// spanWalk is what a walk of the tokens saw: the tokens, the ones before
// an error included, and whether it failed.
type spanWalk struct {
	tokens string
	failed bool
}

func walkTokens(walk func(func(capsule.JSONToken, string)) error) (spanWalk, error) {
	var toks []jsonTok
	err := walk(func(tok capsule.JSONToken, s string) { toks = append(toks, jsonTok{tok, s}) })
	return spanWalk{fmt.Sprint(toks), err != nil}, nil
}

// spanWalkPair holds walkJSONSpans to capsule.WalkJSON: the grammar's
// edges, the nesting bound on either side, the example capsules; generated,
// one-byte changes of those (a byte replaced, inserted or dropped, from the
// bytes that steer the scanner) and random strings of escapes, surrogate
// halves, multi-byte and invalid UTF-8, quotes and backslashes.
var spanWalkPair = differential.Pair[[]byte, spanWalk]{
	Name: "SpanWalk",
	Fast: func(raw []byte) (spanWalk, error) {
		return walkTokens(func(f func(capsule.JSONToken, string)) error { return walkJSONSpans(string(raw), f) })
	},
	Reference: func(raw []byte) (spanWalk, error) {
		return walkTokens(func(f func(capsule.JSONToken, string)) error { return capsule.WalkJSON(raw, f) })
	},
	Seeds: func() (out [][]byte) {
		for _, c := range append(spanWalkCases, nested(999), nested(1000), nested(1001), `{"a":`+nested(999)+`}`, `{"a":`+nested(1000)+`}`) {
			out = append(out, []byte(c))
		}
		return append(out, exampleCapsules()...)
	}(),
	Generate: func(r *rand.Rand) []byte {
		if r.IntN(2) == 0 {
			return randomEscapes(r)
		}
		return steeredEdit(r)
	},
	Count:  20000 + 300*31,
	Decode: bytesInput,
	Encode: bytesOutput,
}

// spanWalkBytesPair is spanWalkPair over the bytes as received, the form
// Rule 9 walks: the same inputs, the spans made strings for the
// comparison.
var spanWalkBytesPair = func() differential.Pair[[]byte, spanWalk] {
	p := spanWalkPair
	p.Name = "SpanWalkBytes"
	p.Fast = func(raw []byte) (spanWalk, error) {
		return walkTokens(func(f func(capsule.JSONToken, string)) error {
			return walkJSONSpans(raw, func(tok capsule.JSONToken, s []byte) { f(tok, string(s)) })
		})
	}
	return p
}()

// steeredEdit is an example capsule with a byte replaced, inserted or
// dropped, from the bytes that steer the scanner.
func steeredEdit(r *rand.Rand) []byte {
	steer := []string{`{`, `}`, `[`, `]`, `,`, `:`, `"`, `\`, `u`, `D`, `8`, `0`, `e`, `.`, `-`, ` `, "\xff", "\xc3", "\x01", "\n", `n`, `t`}
	ex := exampleCapsules()
	b := string(ex[r.IntN(len(ex))])
	at := r.IntN(len(b) + 1)
	c := steer[r.IntN(len(steer))]
	switch r.IntN(3) {
	case 0:
		if at < len(b) {
			return []byte(b[:at] + c + b[at+1:])
		}
	case 1:
		return []byte(b[:at] + c + b[at:])
	default:
		if at < len(b) {
			return []byte(b[:at] + b[at+1:])
		}
	}
	return []byte(b)
}

// randomEscapes is a list of a random string of escapes, surrogate
// halves, multi-byte and invalid UTF-8, quotes and backslashes, and "x".
func randomEscapes(r *rand.Rand) []byte {
	parts := []string{`a`, `Z`, ` `, `\"`, `\\`, `\/`, `\n`, `\t`, `\u0041`, `\u00e9`, `\uD83D`, `\uDE00`, `\uDBFF\uDFFF`,
		`\u12`, `\x`, `\`, `"`, "\xff", "\xc3", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xed\xa0\x80", "\x1f", "\x7f"}
	var b strings.Builder
	b.WriteString(`["`)
	for range r.IntN(8) {
		b.WriteString(parts[r.IntN(len(parts))])
	}
	b.WriteString(`","x"]`)
	return []byte(b.String())
}
