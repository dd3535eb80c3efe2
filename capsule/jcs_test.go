package capsule_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

func TestCanonicalize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{
			name: "rfc8785 3.2.2 example",
			in: `{
				"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
				"string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
				"literals": [null, true, false]
			}`,
			want: `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],` +
				`"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		{
			name: "rfc8785 3.2.3 key sorting by utf-16 code units",
			in: `{
				"\u20ac": "Euro Sign",
				"\r": "Carriage Return",
				"\ufb33": "Hebrew Letter Dalet With Dagesh",
				"1": "One",
				"\ud83d\ude00": "Emoji: Grinning Face",
				"\u0080": "Control",
				"\u00f6": "Latin Small Letter O With Diaeresis"
			}`,
			want: "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\"," +
				"\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\"," +
				"\"\U0001F600\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
		{name: "scalar number", in: ` 4.50 `, want: `4.5`},
		{name: "exponent upper case", in: `1E30`, want: `1e+30`},
		{name: "small decimal", in: `2e-3`, want: `0.002`},
		{name: "tiny", in: `0.000000000000000000000000001`, want: `1e-27`},
		{name: "negative zero", in: `-0`, want: `0`},
		{name: "negative zero fraction", in: `-0.0e5`, want: `0`},
		{name: "integer stays plain below 1e21", in: `100000000000000000000`, want: `100000000000000000000`},
		{name: "1e21 switches to exponent", in: `1000000000000000000000`, want: `1e+21`},
		{name: "1e-6 stays plain", in: `0.000001`, want: `0.000001`},
		{name: "1e-7 switches to exponent", in: `0.0000001`, want: `1e-7`},
		{name: "beyond 2^53 rounds", in: `9007199254740993`, want: `9007199254740992`},
		{name: "underflow is zero", in: `1e-400`, want: `0`},
		{name: "euro stays literal", in: `"\u20ac"`, want: `"€"`},
		{name: "control char lower hex", in: `"\u000f\u001F"`, want: `"\u000f\u001f"`},
		{name: "short escapes", in: `"\b\f\n\r\t\"\\"`, want: `"\b\f\n\r\t\"\\"`},
		{name: "solidus unescaped", in: `"\/"`, want: `"/"`},
		{name: "del and line separator literal", in: `"\u007f\u2028"`, want: "\"\u007f\u2028\""},
		{name: "surrogate pair literal", in: `"\uD83D\uDE00"`, want: `"😀"`},
		{name: "html not escaped", in: `"<a&b>"`, want: `"<a&b>"`},
		{name: "nested and empty", in: "{ \"b\" : [ {}, [], { \"z\":1, \"a\":[ ] } ],\n\"a\":null }", want: `{"a":null,"b":[{},[],{"a":[],"z":1}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := capsule.Canonicalize([]byte(tt.in))
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
		})
	}
}

// TestCanonicalizeNumbers is the IEEE-754 table of RFC 8785 Appendix B.
func TestCanonicalizeNumbers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			// Go's %g spelling of the same double: a different text, same value.
			in := strconv.FormatFloat(math.Float64frombits(tt.bits), 'g', -1, 64)
			got, err := capsule.Canonicalize([]byte(in))
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
		})
	}
}

func TestCanonicalizeRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
	}{
		{"empty", ``},
		{"whitespace only", "  \n"},
		{"truncated object", `{"a":1`},
		{"trailing comma", `[1,]`},
		{"trailing value", `{} {}`},
		{"trailing garbage", `1 x`},
		{"single quotes", `{'a':1}`},
		{"nan", `NaN`},
		{"duplicate key", `{"a":1,"a":2}`},
		{"duplicate key after unescaping", `{"a":1,"\u0061":2}`},
		{"nested duplicate key", `{"x":[{"k":1,"k":1}]}`},
		{"invalid utf-8", "\"\xff\""},
		{"invalid utf-8 key", "{\"\xc3\x28\":1}"},
		{"lone high surrogate", `"\ud83d"`},
		{"high surrogate then letter", `"\ud83dx"`},
		{"lone low surrogate", `"\ude00"`},
		{"reversed pair", `"\ude00\ud83d"`},
		{"number overflow", `1e400`},
		{"raw control char", "\"\x01\""},
		{"too deep", strings.Repeat("[", 1001) + strings.Repeat("]", 1001)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := capsule.Canonicalize([]byte(tt.in))
			require.ErrorIs(t, err, capsule.ErrInvalidJSON)
		})
	}
}

// TestCanonicalizeEscapedBackslashU: an escaped backslash before "u" is not a \u escape.
func TestCanonicalizeEscapedBackslashU(t *testing.T) {
	t.Parallel()
	got, err := capsule.Canonicalize([]byte(`"\\ud800"`))
	require.NoError(t, err)
	require.Equal(t, `"\\ud800"`, string(got))
}

const testCapsule = `{
  "schema_version": "1.0",
  "capsule_id": "0190a8f2-6c1e-7b7a-9a39-7c1f5b2c9e01",
  "created_at": "2026-01-01T00:00:00Z",
  "budget": {"tokens": 10000, "dollars": 5.10},
  "task": {"kind": "stub", "title": "Touch README ✓"},
  "context_refs": ["file:go.mod"],
  "integrity": {"sha256": "0000000000000000000000000000000000000000000000000000000000000000"}
}`

func TestDigest(t *testing.T) {
	t.Parallel()
	want, err := capsule.Digest([]byte(testCapsule))
	require.NoError(t, err)
	require.Regexp(t, `^[0-9a-f]{64}$`, want)

	same := []struct{ name, in string }{
		{"reordered and compact", `{"task":{"title":"Touch README ✓","kind":"stub"},"context_refs":["file:go.mod"],` +
			`"budget":{"dollars":5.1,"tokens":10000},"created_at":"2026-01-01T00:00:00Z",` +
			`"capsule_id":"0190a8f2-6c1e-7b7a-9a39-7c1f5b2c9e01","schema_version":"1.0"}`},
		{"escapes and number spelling", `{"schema_version":"1.0","capsule_id":"0190a8f2-6c1e-7b7a-9a39-7c1f5b2c9e01",` +
			`"created_at":"2026-01-01T00:00:00Z","budget":{"tokens":1E4,"dollars":51e-1},` +
			`"task":{"kind":"\u0073tub","title":"Touch README \u2713"},"context_refs":["file:go.mod"],` +
			`"integrity":{"sha256":"something else","extra":true}}`},
	}
	for _, tt := range same {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := capsule.Digest([]byte(tt.in))
			require.NoError(t, err)
			require.Equal(t, want, got)
		})
	}

	t.Run("content change changes digest", func(t *testing.T) {
		t.Parallel()
		got, err := capsule.Digest([]byte(strings.Replace(testCapsule, "10000", "10001", 1)))
		require.NoError(t, err)
		require.NotEqual(t, want, got)
	})
	t.Run("only the top-level integrity is left out", func(t *testing.T) {
		t.Parallel()
		a, err := capsule.Digest([]byte(`{"x":{"integrity":1}}`))
		require.NoError(t, err)
		b, err := capsule.Digest([]byte(`{"x":{"integrity":2}}`))
		require.NoError(t, err)
		require.NotEqual(t, a, b)
	})
	t.Run("not an object", func(t *testing.T) {
		t.Parallel()
		_, err := capsule.Digest([]byte(`[1,2]`))
		require.ErrorIs(t, err, capsule.ErrInvalidJSON)
	})
}

func TestSealVerify(t *testing.T) {
	t.Parallel()
	sealed, err := capsule.Seal([]byte(testCapsule))
	require.NoError(t, err)
	require.NoError(t, capsule.VerifyIntegrity(sealed))

	t.Run("output form", func(t *testing.T) {
		t.Parallel()
		s := string(sealed)
		require.True(t, strings.HasSuffix(s, "}\n"))
		require.Contains(t, s, "\n  \"budget\": {\n    \"dollars\": 5.10,\n    \"tokens\": 10000\n  },")
		require.Contains(t, s, `"Touch README ✓"`)
		digest, err := capsule.Digest([]byte(testCapsule))
		require.NoError(t, err)
		require.Contains(t, s, "\"integrity\": {\n    \"sha256\": \""+digest+"\"\n  }")
	})
	t.Run("seal is idempotent", func(t *testing.T) {
		t.Parallel()
		again, err := capsule.Seal(sealed)
		require.NoError(t, err)
		require.Equal(t, string(sealed), string(again))
	})
	t.Run("reformatted capsule still verifies", func(t *testing.T) {
		t.Parallel()
		var v map[string]any
		require.NoError(t, json.Unmarshal(sealed, &v))
		compact, err := json.Marshal(v)
		require.NoError(t, err)
		require.NoError(t, capsule.VerifyIntegrity(compact))
	})
	t.Run("foreign integrity members dropped", func(t *testing.T) {
		t.Parallel()
		out, err := capsule.Seal([]byte(`{"a":1,"integrity":{"sha256":"x","algo":"md5"}}`))
		require.NoError(t, err)
		require.NotContains(t, string(out), "md5")
		require.NoError(t, capsule.VerifyIntegrity(out))
	})

	tampered := []struct{ name, in string }{
		{"value changed", strings.Replace(string(sealed), "10000", "99999", 1)},
		{"member added", strings.Replace(string(sealed), `"budget"`, `"wave_id": "w1", "budget"`, 1)},
		{"digest changed", strings.Replace(string(sealed), `"sha256": "`, `"sha256": "0`, 1)},
		{"integrity missing", testCapsule[:strings.Index(testCapsule, `,
  "integrity"`)] + "}"},
		{"sha256 not a string", `{"a":1,"integrity":{"sha256":42}}`},
		{"integrity not an object", `{"a":1,"integrity":"abc"}`},
	}
	for _, tt := range tampered {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := capsule.VerifyIntegrity([]byte(tt.in))
			require.ErrorIs(t, err, capsule.ErrIntegrityMismatch)
			require.NotErrorIs(t, err, capsule.ErrInvalidJSON)
		})
	}

	t.Run("invalid JSON is not a mismatch", func(t *testing.T) {
		t.Parallel()
		err := capsule.VerifyIntegrity([]byte(`{"a":1,"a":1}`))
		require.ErrorIs(t, err, capsule.ErrInvalidJSON)
		require.NotErrorIs(t, err, capsule.ErrIntegrityMismatch)
	})
}

func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{
		testCapsule,
		`{"\u20ac":1,"\ud83d\ude00":[1E30,-0,4.50]}`,
		`"\u000f\\ud800\/"`,
		`[null,true,false,{},[]]`,
		`{"a":1,"a":2}`,
		"\"\xff\"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		once, err := capsule.Canonicalize(raw)
		if err != nil {
			return
		}
		require.True(t, json.Valid(once), "canonical form %q is not JSON", once)
		twice, err := capsule.Canonicalize(once)
		require.NoError(t, err)
		require.Equal(t, string(once), string(twice))
	})
}

func ExampleCanonicalize() {
	out, err := capsule.Canonicalize([]byte(`{"b": [4.50, 1E30, -0], "a": "\u20ac\u000f"}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out))
	// Output: {"a":"€\u000f","b":[4.5,1e+30,0]}
}
