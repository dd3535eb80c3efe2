package capsule_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/differential"
	"github.com/sagad/sagad/schemas"
)

// documentResult is what a decoding of a capsule's bytes gives: the
// parsed value, the capsule and whether it was filled (the fast path) or
// decoded (encoding/json), and encoding/json's error.
type documentResult struct {
	value  any
	cp     *capsule.Capsule
	filled bool
	err    error
}

// documentCapsulePair holds Document.Capsule to json.Unmarshal: what the
// fast decoder fills is what encoding/json fills, with no error, and a
// capsule encoding/json decodes that the schema accepts is always filled
// (the fast path is the one RECEPTION takes). ParseDocument fails exactly
// when ParseJSON does, with its value. Seeds: the example capsules, a
// capsule with every member and odd spellings; the neighbours of the full
// capsule run in TestDocumentCapsuleNeighbours.
var documentCapsulePair = differential.Pair[[]byte, documentResult]{
	Name: "DocumentCapsule",
	Fast: func(raw []byte) (documentResult, error) {
		doc, err := capsule.ParseDocument(raw)
		if err != nil {
			return documentResult{}, err
		}
		got, ok := doc.Capsule()
		return documentResult{value: doc.Value, cp: got, filled: ok}, nil
	},
	Reference: func(raw []byte) (documentResult, error) {
		value, err := capsule.ParseJSON(raw)
		if err != nil {
			return documentResult{}, err
		}
		var want capsule.Capsule
		werr := json.Unmarshal(raw, &want)
		return documentResult{value: value, cp: &want, filled: werr == nil, err: werr}, nil
	},
	Compare: func(t testing.TB, raw []byte, fast, ref documentResult) {
		require.True(t, reflect.DeepEqual(ref.value, fast.value), "the document's value is ParseJSON's")
		if fast.filled {
			require.NoError(t, ref.err, "filled what encoding/json refuses: %s", raw)
			require.True(t, reflect.DeepEqual(ref.cp, fast.cp), "%s\nencoding/json: %+v\nfilled:        %+v", raw, *ref.cp, *fast.cp)
			return
		}
		require.Nil(t, fast.cp)
		if ref.err == nil {
			require.Error(t, schemas.Validate(schemas.Capsule, raw), "a capsule RECEPTION accepts left to encoding/json: %s", raw)
		}
	},
	Seeds: append(decodeSeeds(nil), []byte(`{"created_at":"2026-01-01T00:00:00\u005a","metadata": {"a" :[1 ]} }`),
		[]byte(`{"review":{"operator_gate":"\u0061ll"},"budget":{"tokens":1.0}}`),
		[]byte(`{"Capsule_ID":"x","chain":{"findings":[{"message":"m"}]}}`)),
	Decode: func(b []byte) ([]byte, bool) { return b, true },
	Encode: func(b []byte) []byte { return b },
}

// externalPairs are the pairs of this package's fast paths that its
// external tests hold (differential_internal_test.go has the others).
var externalPairs = differential.Registry{documentCapsulePair}

func TestDifferentialExternal(t *testing.T) {
	t.Parallel()
	differential.RunAll(t, externalPairs)
}

// sameAsUnmarshal runs documentCapsulePair on raw and reports whether the
// fast path filled the capsule.
func sameAsUnmarshal(t *testing.T, raw []byte) bool {
	t.Helper()
	documentCapsulePair.Check(t, raw)
	doc, err := capsule.ParseDocument(raw)
	if err != nil {
		return false
	}
	_, ok := doc.Capsule()
	return ok
}

// decodeSeeds are the example capsules and a capsule with every member the
// schema declares.
func decodeSeeds(testing.TB) [][]byte {
	files, _ := filepath.Glob("../examples/capsules/*.json")
	files = append(files, "../schemas/testdata/capsule_full.json", "../schemas/testdata/capsule_valid.json")
	var out [][]byte
	for _, name := range files {
		if b, err := os.ReadFile(name); err == nil {
			out = append(out, b)
		}
	}
	return out
}

// palette holds values written as a producer might: each type, numbers at
// the edges of int64 and float64 and in the spellings an integer field
// refuses, escapes where a field's own decoder sees them as written
// (times, the operator gate), times RFC 3339 and time.Time disagree on,
// lists and objects with members known, unknown and in another case.
var palette = []string{
	`null`, `true`, `false`, `0`, `-0`, `3`, `-5`, `1.0`, `1e2`, `1.5`, `-0.25`, `1E+2`,
	`99999999999999999999`, `9223372036854775807`, `-9223372036854775808`, `9223372036854775808`,
	`2147483648`, `1e400`, `5e-324`, `""`, `"x"`, `"all"`, `"\u0061ll"`, `"ALL"`, `"operator"`,
	`"none"`, `"a\nb\"c\\"`, `"\u00e9\ud83d\ude00"`, `"<&>"`, `"2026-01-01T00:00:00Z"`,
	`"2026-01-01T00:00:00.123456789+01:00"`, `"2026-01-01t00:00:00z"`, `"2026-01-01T24:00:00Z"`,
	`"2026-02-30T00:00:00Z"`, `"2026-01-01T23:59:60Z"`, `"2026-01-01T00:00:00+24:00"`,
	`"2026-01-01 00:00:00Z"`, `"2026-01-01T00:00:00\u005a"`, `"\u0032026-01-01T00:00:00Z"`,
	`"0000-01-01T00:00:00Z"`, `"2026-01-01T00:00:00.Z"`, `"2026-01-01T00:00:00,5Z"`,
	`"2026-1-01T00:00:00Z"`, `[]`, `["a"]`, `["a",1]`, `[null]`, `[{}]`, `[[]]`,
	`[{"message":"m","rule":2,"source":"verifier"}]`, `[{"Message":"m"}]`, `[{"message":null}]`,
	`{}`, `{"a":1}`, `{"kind":"k","title":"t"}`, `{"mode":"none"}`, `{"sha256":"00"}`,
	`{"tokens":1,"dollars":1}`, `{"id":"c","step":1}`, `{"Kind":"k"}`, `{"approved_at":null}`,
	`{"max_attempts":2,"max_wall_time":"30m"}`, `{"tokens":1,"dollars":1,"child":{}}`,
}

// TestDocumentCapsuleNeighbours checks the seeds and the documents one
// step away from a capsule with every member: each value replaced by each
// palette value, each member removed, renamed to another case or to an
// unknown name, or written twice in two cases; written compact or indented
// in turn (space around the bytes metadata keeps).
func TestDocumentCapsuleNeighbours(t *testing.T) {
	t.Parallel()
	var filled, total int
	for _, seed := range decodeSeeds(t) {
		total++
		if sameAsUnmarshal(t, seed) {
			filled++
		}
	}
	seed, err := os.ReadFile("../schemas/testdata/capsule_full.json")
	require.NoError(t, err)
	base, err := capsule.ParseJSON(seed)
	require.NoError(t, err)
	var places [][]any
	walkPlaces(base, nil, &places)
	for _, p := range places {
		for _, doc := range neighbours(seed, p) {
			total++
			if sameAsUnmarshal(t, encode(t, doc, total%2 == 0)) {
				filled++
			}
		}
	}
	t.Logf("%d of %d documents filled without encoding/json", filled, total)
	require.Positive(t, filled)
}

// TestDocumentCapsuleEscapedNames: a member name written with an escape is
// the same member (the parse decodes it); the members whose bytes are taken
// as written are found under such a name too, and the capsule is filled.
func TestDocumentCapsuleEscapedNames(t *testing.T) {
	t.Parallel()
	seed, err := os.ReadFile("../schemas/testdata/capsule_full.json")
	require.NoError(t, err)
	for _, name := range []string{"created_at", "deadline", "spec", "approved_at", "review", "operator_gate", "metadata"} {
		escaped := strings.Replace(name, name[:1], `\u00`+strconv.FormatInt(int64(name[0]), 16), 1)
		raw := bytes.Replace(seed, []byte(`"`+name+`"`), []byte(`"`+escaped+`"`), 1)
		require.NotEqual(t, seed, raw, name)
		require.True(t, sameAsUnmarshal(t, raw), "%s written %s", name, escaped)
	}
	// A name that only starts like a member's, and one escaped to another.
	raw := bytes.Replace(seed, []byte(`"deadline"`), []byte(`"deadline\u0020"`), 1)
	require.False(t, sameAsUnmarshal(t, raw))
}

// FuzzDocumentCapsule: on any bytes, Document.Capsule is json.Unmarshal or
// declines (documentCapsulePair). Seeds: the pair's and
// testdata/fuzz/FuzzDocumentCapsule.
func FuzzDocumentCapsule(f *testing.F) { differential.Fuzz(f, documentCapsulePair) }

// walkPlaces collects the path of every value in v (v itself included).
func walkPlaces(v any, path []any, out *[][]any) {
	*out = append(*out, path)
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			walkPlaces(e, append(path[:len(path):len(path)], k), out)
		}
	case []any:
		for i, e := range x {
			walkPlaces(e, append(path[:len(path):len(path)], i), out)
		}
	}
}

// neighbours returns fresh trees of seed changed at path p.
func neighbours(seed []byte, p []any) []any {
	fresh := func() any { v, _ := capsule.ParseJSON(seed); return v }
	var out []any
	for _, lit := range palette {
		out = append(out, setAt(fresh(), p, json.RawMessage(lit)))
	}
	if len(p) == 0 {
		return out
	}
	name, isName := p[len(p)-1].(string)
	if !isName {
		return out
	}
	for _, rename := range []string{"", strings.ToUpper(name), strings.ToUpper(name[:1]) + name[1:], "x_" + name} {
		doc := fresh()
		parent := getAt(doc, p[:len(p)-1]).(map[string]any)
		v := parent[name]
		delete(parent, name)
		if rename != "" {
			parent[rename] = v
		}
		out = append(out, doc)
	}
	// Both spellings: encoding/json takes the later in the text.
	doc := fresh()
	parent := getAt(doc, p[:len(p)-1]).(map[string]any)
	parent[strings.ToUpper(name)] = parent[name]
	return append(out, doc)
}

func getAt(v any, p []any) any {
	for _, step := range p {
		switch s := step.(type) {
		case string:
			v = v.(map[string]any)[s]
		case int:
			v = v.([]any)[s]
		}
	}
	return v
}

func setAt(root any, p []any, val any) any {
	if len(p) == 0 {
		return val
	}
	switch s := p[len(p)-1].(type) {
	case string:
		getAt(root, p[:len(p)-1]).(map[string]any)[s] = val
	case int:
		getAt(root, p[:len(p)-1]).([]any)[s] = val
	}
	return root
}

// encode writes doc without HTML escapes, compact or indented.
func encode(t *testing.T, doc any, indent bool) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if indent {
		enc.SetIndent("", " ")
	}
	require.NoError(t, enc.Encode(doc))
	return b.Bytes()
}
