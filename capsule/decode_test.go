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
	"github.com/sagad/sagad/schemas"
)

// sameAsUnmarshal holds Document.Capsule to json.Unmarshal on raw: what the
// fast decoder fills is what encoding/json fills, with no error, and a
// capsule encoding/json decodes that the schema accepts is always filled
// (the fast path is the one RECEPTION takes). It reports whether it filled.
func sameAsUnmarshal(t *testing.T, raw []byte) bool {
	t.Helper()
	doc, err := capsule.ParseDocument(raw)
	value, perr := capsule.ParseJSON(raw)
	require.Equal(t, perr == nil, err == nil, "ParseDocument %v, ParseJSON %v", err, perr)
	if err != nil {
		return false
	}
	require.True(t, reflect.DeepEqual(value, doc.Value), "the document's value is ParseJSON's")
	got, ok := doc.Capsule()
	var want capsule.Capsule
	werr := json.Unmarshal(raw, &want)
	if ok {
		require.NoError(t, werr, "filled what encoding/json refuses: %s", raw)
		require.True(t, reflect.DeepEqual(&want, got), "%s\nencoding/json: %+v\nfilled:        %+v", raw, want, *got)
		return true
	}
	require.Nil(t, got)
	if werr == nil {
		require.Error(t, schemas.Validate(schemas.Capsule, raw), "a capsule RECEPTION accepts left to encoding/json: %s", raw)
	}
	return false
}

// decodeSeeds are the example capsules and a capsule with every member the
// schema declares.
func decodeSeeds(t testing.TB) [][]byte {
	files, err := filepath.Glob("../examples/capsules/*.json")
	require.NoError(t, err)
	files = append(files, "../schemas/testdata/capsule_full.json", "../schemas/testdata/capsule_valid.json")
	var out [][]byte
	for _, name := range files {
		b, err := os.ReadFile(name)
		require.NoError(t, err)
		out = append(out, b)
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
// declines (sameAsUnmarshal). Seeds: the example capsules, a capsule with
// every member, and testdata/fuzz/FuzzDocumentCapsule.
func FuzzDocumentCapsule(f *testing.F) {
	for _, seed := range decodeSeeds(f) {
		f.Add(seed)
	}
	f.Add([]byte(`{"created_at":"2026-01-01T00:00:00\u005a","metadata": {"a" :[1 ]} }`))
	f.Add([]byte(`{"review":{"operator_gate":"\u0061ll"},"budget":{"tokens":1.0}}`))
	f.Add([]byte(`{"Capsule_ID":"x","chain":{"findings":[{"message":"m"}]}}`))
	f.Fuzz(func(t *testing.T, raw []byte) { sameAsUnmarshal(t, raw) })
}

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
