package rules

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

type jsonTok struct {
	tok capsule.JSONToken
	s   string
}

// spanWalkAgrees reports where walkJSONSpans and capsule.WalkJSON disagree
// on raw: the tokens (the ones before an error included) and whether it is
// an error. "" when they agree.
func spanWalkAgrees(raw []byte) string {
	var want, got []jsonTok
	werr := capsule.WalkJSON(raw, func(tok capsule.JSONToken, s string) { want = append(want, jsonTok{tok, s}) })
	gerr := walkJSONSpans(string(raw), func(tok capsule.JSONToken, s string) { got = append(got, jsonTok{tok, s}) })
	if (werr == nil) != (gerr == nil) {
		return fmt.Sprintf("%q: WalkJSON %v, spans %v", raw, werr, gerr)
	}
	if fmt.Sprint(want) != fmt.Sprint(got) {
		return fmt.Sprintf("%q: WalkJSON %v, spans %v", raw, want, got)
	}
	return ""
}

// spanWalkCases are the edges of the grammar: escapes and surrogates valid,
// broken and cut off; invalid UTF-8 and control characters in and out of
// escapes; numbers and literals a byte short; streams of values; the
// nesting bound.
var spanWalkCases = []string{
	``, ` `, `"`, `""`, `"a"`, `"a\"b"`, `"\\"`, `"\`, `"\"`, `"a\\\"`, `"\/\b\f\n\r\t"`, `"\x"`,
	`"\u00e9"`, `"\u00E9x"`, `"\u00g9"`, `"\u00"`, `"\u"`, `"\uD83D\uDE00"`, `"\uD83D"`, `"\uD83Dx"`,
	`"\uD83D\u0041"`, `"\uDE00\uD83D"`, `"\uD800\u12"`, `"\uD800\u"`, `"\uD800\"`, `"\uD800\\"`,
	"\"\xff\"", "\"a\xc3\"", "\"\xc3\xa9\"", "\"\xed\xa0\x80\"", "\"\xef\xbf\xbd\"", "\"\x01\"", "\"\\\x01\"",
	"\"a\tb\"", "\"\x7f\"", "\"\xff\\n\"", "\"\\n\xff\"", "\"\xe2\x82\"",
	`0`, `-`, `-0`, `01`, `1.`, `1.5`, `1e`, `1e+`, `1E-3`, `-0.5e10`, `1.e3`, `.5`, `+1`, `12true`, `1 2`, `1,2`,
	`t`, `tru`, `true`, `truex`, `nul`, `null`, `false`, `fals`, `nan`,
	`{}`, `[]`, `{}{}`, `{`, `[`, `}`, `]`, `{"a"}`, `{"a":}`, `{"a":1,}`, `[1,]`, `[1 2]`, `{"a" 1}`, `{1:2}`,
	`{"a":1 "b":2}`, `{"a":[1,{"b":"c"}],"d":"e"}`, `{"a":"b","a":"c"}`, `["\u00e9", "x\\y", {"k\n": "v"}]`,
	` [ "a" , { "b" : null } ] `, "\t{\"a\":\r\n1}\n", `[true,false,null,-1.5e-3,"s"]`, `{"a":"b"`, `["a"`,
}

func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// TestSpanWalkMatchesWalkJSON holds walkJSONSpans to capsule.WalkJSON: the
// grammar's edges, the nesting bound on either side, the example capsules
// and 300 one-byte changes of each (a byte replaced, inserted or dropped,
// from the bytes that steer the scanner).
func TestSpanWalkMatchesWalkJSON(t *testing.T) {
	t.Parallel()
	corpus := append([]string(nil), spanWalkCases...)
	corpus = append(corpus, nested(999), nested(1000), nested(1001), `{"a":`+nested(999)+`}`, `{"a":`+nested(1000)+`}`)
	files, err := filepath.Glob("../examples/capsules/*")
	require.NoError(t, err)
	require.NotEmpty(t, files, "the example capsules are the corpus")
	r := rand.New(rand.NewPCG(11, 13))
	steer := []string{`{`, `}`, `[`, `]`, `,`, `:`, `"`, `\`, `u`, `D`, `8`, `0`, `e`, `.`, `-`, ` `, "\xff", "\xc3", "\x01", "\n", `n`, `t`}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		corpus = append(corpus, string(b))
		for range 300 {
			at := r.IntN(len(b) + 1)
			c := steer[r.IntN(len(steer))]
			switch r.IntN(3) {
			case 0:
				if at < len(b) {
					corpus = append(corpus, string(b[:at])+c+string(b[at+1:]))
				}
			case 1:
				corpus = append(corpus, string(b[:at])+c+string(b[at:]))
			default:
				if at < len(b) {
					corpus = append(corpus, string(b[:at])+string(b[at+1:]))
				}
			}
		}
	}
	for _, doc := range corpus {
		if msg := spanWalkAgrees([]byte(doc)); msg != "" {
			t.Fatal(msg)
		}
	}
}

// TestSpanWalkRandomStrings holds the string decoding to WalkJSON's over
// random strings of escapes, surrogate halves, multi-byte and invalid
// UTF-8, quotes and backslashes.
func TestSpanWalkRandomStrings(t *testing.T) {
	t.Parallel()
	parts := []string{`a`, `Z`, ` `, `\"`, `\\`, `\/`, `\n`, `\t`, `\u0041`, `\u00e9`, `\uD83D`, `\uDE00`, `\uDBFF\uDFFF`,
		`\u12`, `\x`, `\`, `"`, "\xff", "\xc3", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xed\xa0\x80", "\x1f", "\x7f"}
	r := rand.New(rand.NewPCG(17, 19))
	for range 20000 {
		var b strings.Builder
		b.WriteString(`["`)
		for range r.IntN(8) {
			b.WriteString(parts[r.IntN(len(parts))])
		}
		b.WriteString(`","x"]`)
		if msg := spanWalkAgrees([]byte(b.String())); msg != "" {
			t.Fatal(msg)
		}
	}
}

func FuzzSpanWalkMatchesWalkJSON(f *testing.F) {
	for _, c := range spanWalkCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if msg := spanWalkAgrees(raw); msg != "" {
			t.Fatal(msg)
		}
	})
}

// BenchmarkWalk compares the span walk with capsule.WalkJSON on a sealed
// capsule: every token, strings handed over.
func BenchmarkWalk(b *testing.B) {
	raw, err := os.ReadFile("../examples/capsules/valid.json")
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	count := func(capsule.JSONToken, string) { n++ }
	b.Run("WalkJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := capsule.WalkJSON(raw, count); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("spans", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := walkJSONSpans(string(raw), count); err != nil {
				b.Fatal(err)
			}
		}
	})
}
