package rules

import (
	"os"
	"strings"
	"testing"

	"github.com/sagad/sagad/capsule"
)

type jsonTok struct {
	tok capsule.JSONToken
	s   string
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

// BenchmarkWalk compares the span walk with capsule.WalkJSON on a sealed
// capsule: every token, strings handed over; the span walk over a string
// copy of the bytes (spans) and over the bytes themselves (bytes, Rule 9's).
func BenchmarkWalk(b *testing.B) {
	raw, err := os.ReadFile("../examples/capsules/valid.json")
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	count := func(capsule.JSONToken, string) { n++ }
	countBytes := func(capsule.JSONToken, []byte) { n++ }
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
	b.Run("bytes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := walkJSONSpans(raw, countBytes); err != nil {
				b.Fatal(err)
			}
		}
	})
}
