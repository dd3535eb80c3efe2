package capsule

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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

func sameParse(t *testing.T, raw []byte) {
	t.Helper()
	want, werr := parseTokens(raw)
	got, gerr := parse(raw)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%q: token walk error %v, scanner error %v", raw, werr, gerr)
	}
	if werr == nil && !reflect.DeepEqual(want, got) {
		t.Fatalf("%q: token walk %#v, scanner %#v", raw, want, got)
	}
}

// TestScannerMatchesTokenWalk holds the scanner to the token walk it
// replaced, on random valid JSON and on random corruptions of it and of the
// example capsules.
func TestScannerMatchesTokenWalk(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 11))
	var corpus [][]byte
	files, err := filepath.Glob("../examples/capsules/*")
	require.NoError(t, err)
	require.NotEmpty(t, files, "the example capsules are part of the corpus")
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		corpus = append(corpus, b)
	}
	for i := 0; i < 3000; i++ {
		var b strings.Builder
		randJSON(r, &b, 0)
		corpus = append(corpus, []byte(b.String()))
	}
	for _, doc := range corpus {
		sameParse(t, doc)
		for m := 0; m < 5; m++ {
			bad := append([]byte(nil), doc...)
			if len(bad) == 0 {
				break
			}
			at := r.IntN(len(bad))
			switch r.IntN(3) {
			case 0:
				bad = append(bad[:at], bad[at+1:]...)
			case 1:
				bad[at] = `{}[],:"\ -+.eE0a9tfnu`[r.IntN(21)]
			default:
				bad = append(bad[:at], append([]byte{`{}[],:"\x`[r.IntN(9)]}, bad[at:]...)...)
			}
			sameParse(t, bad)
		}
	}
	for _, s := range []string{"", " ", "{", `{"a":1,"a":2}`, `{"a":1}x`, `[1,]`, `{"a":}`, "\"\x01\"", `01`, `1.`, `-`, `1e`, `"\ud800"`, `"\x"`, `tru`, "\xff"} {
		sameParse(t, []byte(s))
	}
	deep := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	_, err = parse([]byte(deep))
	require.ErrorIs(t, err, ErrInvalidJSON)
}

func FuzzScannerMatchesTokenWalk(f *testing.F) {
	f.Add([]byte(`{"a":[1,"x",{"b":null}],"c":-1.5e3}`))
	f.Add([]byte(`"\ud83d\ude00"`))
	f.Fuzz(func(t *testing.T, raw []byte) { sameParse(t, raw) })
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
