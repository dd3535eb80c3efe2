package capsule

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/differential"
)

// randJSON writes a random JSON value, sometimes with odd but valid
// spellings (escapes, whitespace, exponents, duplicate-prone keys).
func randJSON(r *rand.Rand, b *strings.Builder, depth int) {
	ws := func() {
		for n := r.IntN(3); n > 0; n-- {
			b.WriteByte(" \t\n\r"[r.IntN(4)])
		}
	}
	ws()
	k := r.IntN(8)
	if depth > 4 {
		k = 2 + r.IntN(6)
	}
	switch k {
	case 0:
		b.WriteByte('{')
		for i, n := 0, r.IntN(4); i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			ws()
			b.WriteString(`"` + []string{"a", "b", "c", `\u0061`, "k"}[r.IntN(5)] + `"`)
			ws()
			b.WriteByte(':')
			randJSON(r, b, depth+1)
		}
		ws()
		b.WriteByte('}')
	case 1:
		b.WriteByte('[')
		for i, n := 0, r.IntN(4); i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			randJSON(r, b, depth+1)
		}
		b.WriteByte(']')
	case 2, 3:
		b.WriteByte('"')
		for n := r.IntN(6); n > 0; n-- {
			b.WriteString([]string{"x", "é", "😀", `\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`, `\u00e9`, `\ud83d\ude00`, `\ud83d`, `\ude00`, `\uD83D\uDE00`, `\u0000`, "\u2028"}[r.IntN(18)])
		}
		b.WriteByte('"')
	case 4:
		b.WriteString([]string{"0", "-0", "12", "-3.25", "1e10", "1E-7", "6.02e+23", "0.5", "123456789012345678901234567890"}[r.IntN(9)])
	case 5:
		b.WriteString("true")
	case 6:
		b.WriteString("false")
	default:
		b.WriteString("null")
	}
	ws()
}

// scannerPair holds the scanner to the token walk it replaced, on the
// example capsules, random valid JSON and random corruptions of both.
var scannerPair = differential.Pair[[]byte, any]{
	Name: "ScannerMatchesTokenWalk",
	// The scanner's value must not alias the text, which the caller may
	// change: it parses a copy, overwritten once the parse is done.
	Fast: func(raw []byte) (any, error) {
		text := bytes.Clone(raw)
		v, err := parse(text)
		for i := range text {
			text[i] = '#'
		}
		return v, err
	},
	Reference: func(raw []byte) (any, error) { return parseTokens(raw) },
	Compare: func(t testing.TB, raw []byte, fast, ref any) {
		if !reflect.DeepEqual(ref, fast) {
			t.Fatalf("%q: token walk %#v, scanner %#v", raw, ref, fast)
		}
		// Arrays share their room (popArray): each must be clipped, so
		// that an append to one never writes into the next.
		if !arraysClipped(fast) {
			t.Fatalf("%q: an array of the scanner's value has room past its length", raw)
		}
	},
	Seeds: append(exampleCapsules(), func() (out [][]byte) {
		for _, s := range []string{"", " ", "{", `{"a":1,"a":2}`, `{"a":1}x`, `[1,]`, `{"a":}`, "\"\x01\"", `01`, `1.`, `-`, `1e`, `"\ud800"`, `"\x"`, `tru`, "\xff",
			`{"a":[1,"x",{"b":null}],"c":-1.5e3}`, `"\ud83d\ude00"`} {
			out = append(out, []byte(s))
		}
		return out
	}()...),
	// A random document, or one of the example capsules, corrupted five
	// times in six by a byte deleted, replaced or inserted.
	Generate: func(r *rand.Rand) []byte {
		var doc []byte
		if ex := exampleCapsules(); r.IntN(10) == 0 && len(ex) > 0 {
			doc = append(doc, ex[r.IntN(len(ex))]...) // a copy: corrupted below
		} else {
			var b strings.Builder
			randJSON(r, &b, 0)
			doc = []byte(b.String())
		}
		if r.IntN(6) == 0 || len(doc) == 0 {
			return doc
		}
		at := r.IntN(len(doc))
		switch r.IntN(3) {
		case 0:
			return append(doc[:at], doc[at+1:]...)
		case 1:
			doc[at] = `{}[],:"\ -+.eE0a9tfnu`[r.IntN(21)]
			return doc
		default:
			return append(doc[:at], append([]byte{`{}[],:"\x`[r.IntN(9)]}, doc[at:]...)...)
		}
	},
	Count:  18000,
	Decode: func(b []byte) ([]byte, bool) { return b, true },
	Encode: func(b []byte) []byte { return b },
}

// exampleCapsules are the files of examples/capsules, part of every
// capsule corpus.
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
	require.NotEmpty(t, exampleCapsules(), "the example capsules are part of the corpus")
}

// TestScannerRefusesDeepNesting: past MaxDepth the scanner refuses what
// the token walk would take.
func TestScannerRefusesDeepNesting(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	_, err := parse([]byte(deep))
	require.ErrorIs(t, err, ErrInvalidJSON)
}

func FuzzScannerMatchesTokenWalk(f *testing.F) { differential.Fuzz(f, scannerPair) }

// arraysClipped reports whether every array in v has no room past its
// length.
func arraysClipped(v any) bool {
	switch v := v.(type) {
	case []any:
		if cap(v) != len(v) {
			return false
		}
		for _, e := range v {
			if !arraysClipped(e) {
				return false
			}
		}
	case map[string]any:
		for _, e := range v {
			if !arraysClipped(e) {
				return false
			}
		}
	}
	return true
}

func BenchmarkParse(b *testing.B) {
	raw, err := os.ReadFile("../examples/capsules/valid.json")
	require.NoError(b, err)
	b.Run("token walk", func(b *testing.B) {
		for b.Loop() {
			if _, err := parseTokens(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("scanner", func(b *testing.B) {
		for b.Loop() {
			if _, err := parse(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestParseDuplicateFirst: a repeated member name is the error whatever
// follows it, as when names were looked up before their values were read;
// other errors keep their text and offset.
func TestParseDuplicateFirst(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		`{"a":1,"a":2}`:          `invalid JSON: duplicate object key "a"`,
		`{"a":1,"a" 2}`:          `invalid JSON: duplicate object key "a"`,
		`{"a":1,"a":}`:           `invalid JSON: duplicate object key "a"`,
		`{"a":1,"a":[}`:          `invalid JSON: duplicate object key "a"`,
		`{"a":1,"a":{"a":1,"a"`:  `invalid JSON: duplicate object key "a"`,
		`{"a":{"b":1,"b":2},"a"`: `invalid JSON: duplicate object key "b"`,
		`{"a":1,"\u0061":2}`:     `invalid JSON: duplicate object key "a"`,
		`{"a":1,"b":}`:           `invalid JSON: invalid character '}' looking for beginning of value at offset 11`,
		`{"a":1,"b" 2}`:          `invalid JSON: missing ':' after object key at offset 11`,
		`{"a":1,"b":2,}`:         `invalid JSON: object key is not a string at offset 13`,
	} {
		_, err := parse([]byte(raw))
		require.EqualError(t, err, want, raw)
	}
}

// BenchmarkWalkJSON measures Rule 9's walk over a capsule's strings.
func BenchmarkWalkJSON(b *testing.B) {
	raw, err := os.ReadFile("../examples/capsules/valid.json")
	require.NoError(b, err)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if err := WalkJSON(raw, func(tok JSONToken, s string) { n += len(s) }); err != nil {
			b.Fatal(err)
		}
	}
}
