package schemas

import (
	"bytes"
	"encoding/json"
	"maps"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/differential"
)

// TestFastCoversCapsule fails when capsule.schema.json uses something the
// fast checker cannot compile: RECEPTION would then validate every capsule
// through the library alone (correct, and several times slower).
func TestFastCoversCapsule(t *testing.T) {
	t.Parallel()
	_, err := compileCapsuleFast()
	require.NoError(t, err, "schemas/capsule.schema.json uses a keyword or form that fast.go does not compile. "+
		"Teach compileFast the keyword exactly as jsonschema/v5 checks it, add mutations that reach it to "+
		"FuzzFastAgrees, and run that fuzz target for a while; without that every capsule takes the library's path.")
	require.NotNil(t, fastCapsule())
}

// TestCompileFastRefuses holds the compiler to refusing what it cannot
// decide exactly, so a schema change cannot silently widen the fast path.
func TestCompileFastRefuses(t *testing.T) {
	t.Parallel()
	for name, src := range map[string]string{
		"unknown keyword":           `{"type":"object","unevaluatedProperties":false}`,
		"anyOf":                     `{"anyOf":[{"type":"string"}]}`,
		"not":                       `{"not":{"type":"string"}}`,
		"unknown format":            `{"type":"string","format":"no-such-format"}`,
		"remote ref":                `{"$ref":"other.schema.json#/$defs/x"}`,
		"missing ref":               `{"$ref":"#/$defs/x"}`,
		"ref beside an assertion":   `{"$defs":{"x":{"type":"string"}},"$ref":"#/$defs/x","maxLength":3}`,
		"additionalProperties":      `{"additionalProperties":{"type":"string"}}`,
		"numeric oneOf branch":      `{"oneOf":[{"type":"integer"},{"const":"all"}]}`,
		"object oneOf branch":       `{"oneOf":[{"type":"object","required":["a"]},{"const":"all"}]}`,
		"number const":              `{"const":1}`,
		"fractional minimum":        `{"type":"number","minimum":0.5}`,
		"boolean schema":            `{"properties":{"a":true}}`,
		"maximum":                   `{"type":"integer","maximum":3}`,
		"patternProperties":         `{"patternProperties":{"^a":{"type":"string"}}}`,
		"prefixItems":               `{"prefixItems":[{"type":"string"}]}`,
		"uniqueItems":               `{"type":"array","uniqueItems":true}`,
		"dependentRequired":         `{"dependentRequired":{"a":["b"]}}`,
		"if":                        `{"if":{"type":"string"},"then":{"maxLength":1}}`,
		"negative maxItems":         `{"type":"array","maxItems":-1}`,
		"contentEncoding":           `{"type":"string","contentEncoding":"base64"}`,
		"negative maxLength":        `{"type":"string","maxLength":-1}`,
		"type that does not exist":  `{"type":"text"}`,
		"allOf":                     `{"allOf":[{"type":"string"}]}`,
		"minProperties":             `{"type":"object","minProperties":1}`,
		"exclusiveMinimum":          `{"type":"integer","exclusiveMinimum":0}`,
		"multipleOf":                `{"type":"integer","multipleOf":2}`,
		"nested unknown in $defs":   `{"$defs":{"x":{"if":{}}},"properties":{"a":{"$ref":"#/$defs/x"}}}`,
		"propertyNames":             `{"propertyNames":{"maxLength":3}}`,
		"dynamicRef":                `{"$dynamicRef":"#x"}`,
		"enum of numbers":           `{"enum":[1,2]}`,
		"enum of objects":           `{"enum":[{}]}`,
		"empty enum":                `{"enum":[]}`,
		"items as a list (draft 7)": `{"items":[{"type":"string"}]}`,
		"recursive $ref":            `{"$defs":{"x":{"items":{"$ref":"#/$defs/x"}}},"properties":{"a":{"$ref":"#/$defs/x"}}}`,
	} {
		doc, err := decode([]byte(src))
		require.NoError(t, err, name)
		_, err = compileFast(doc)
		require.Error(t, err, name)
	}
}

// TestFastAgreesOnExamples: every example capsule and the fuzz corpora get
// the same verdict from both paths, and the valid ones take the fast path.
func TestFastAgreesOnExamples(t *testing.T) {
	t.Parallel()
	docs := seedDocs(t)
	require.NotEmpty(t, docs)
	valid := 0
	for _, raw := range docs {
		doc, err := decode(raw)
		if err != nil {
			continue
		}
		if checkAgreement(t, doc) {
			valid++
		}
	}
	require.Positive(t, valid, "no example is valid: the fast path is not exercised")
}

// fastVerdict is a verdict on a capsule: valid or not, and for the
// library whether a number was out of its range (reported, not checked).
type fastVerdict struct {
	valid      bool
	outOfRange bool
	err        error
}

// fastAgreesPair is the differential check of fast.go against the
// library. Whenever the fast checker says valid, the library must too;
// whenever the library says valid, the fast checker must too unless the
// capsule holds a number it leaves to the library; a number out of the
// library's range is reported as a ValidationError and never valid; and
// through the public entry point the verdict is the library's. Its inputs
// are the example capsules and the RECEPTION and capsule fuzz corpora,
// mutated member by member with values chosen at the schema's edges
// (lengths at their limits, patterns just off, date-times the format
// refuses, numbers written as 1.0 or 1e2, members added, removed or of
// another type); TestFastAgreesOnNeighbours and
// TestFastAgreesOnListLengths add every neighbour of a full capsule and
// the list limits.
var fastAgreesPair = differential.Pair[any, fastVerdict]{
	Name: "FastAgrees",
	Fast: func(doc any) (fastVerdict, error) { return fastVerdict{valid: fastCapsule().valid(doc)}, nil },
	Reference: func(doc any) (fastVerdict, error) {
		set, schema, err := lookupSchema(Capsule)
		if err != nil {
			return fastVerdict{}, err
		}
		if _, bad := outOfRange(Capsule, doc); bad {
			// The library would panic; the number is reported instead.
			err := set.validate(Capsule, schema, doc)
			return fastVerdict{outOfRange: true, valid: err == nil, err: err}, nil
		}
		return fastVerdict{valid: schema.Validate(doc) == nil}, nil
	},
	Compare: func(t testing.TB, doc any, fast, ref fastVerdict) {
		if ref.outOfRange {
			var verr *ValidationError
			require.ErrorAs(t, ref.err, &verr)
			require.False(t, fast.valid)
			return
		}
		if fast.valid {
			require.True(t, ref.valid, "the fast path said valid, the library did not: %s", show(doc))
		}
		if ref.valid && !fast.valid {
			require.True(t, hasNonPlainNumber(doc), "the library said valid, the fast path did not: %s", show(doc))
		}
		set, schema, err := lookupSchema(Capsule)
		require.NoError(t, err)
		require.Equal(t, ref.valid, set.validate(Capsule, schema, doc) == nil)
	},
	Seeds: func() (out []any) {
		for i, raw := range seedDocs(nil) {
			doc, err := decode(raw)
			if err != nil {
				continue
			}
			out = append(out, doc)
			if doc, err = decode(raw); err == nil {
				out = append(out, mutate(mutate(doc, byte(i), byte(i*7), byte(i*13)), byte(i*3), 1, byte(i*5)))
			}
		}
		return out
	}(),
	// A capsule's bytes, then a zero byte (never in JSON) and up to eight
	// mutations of three bytes each: a few per input, since each walks
	// the whole capsule and a long list would spend the run growing one.
	Decode: func(b []byte) (any, bool) {
		raw, ops, _ := bytes.Cut(b, []byte{0})
		doc, err := decode(raw)
		if err != nil {
			return nil, false
		}
		ops = ops[:min(len(ops), 3*8)]
		for len(ops) >= 3 {
			doc = mutate(doc, ops[0], ops[1], ops[2])
			ops = ops[3:]
		}
		return doc, true
	},
	Encode: func(doc any) []byte { return []byte(show(doc)) },
}

func TestDifferential(t *testing.T) {
	t.Parallel()
	differential.RunAll(t, differential.Registry{fastAgreesPair, classPatternPair, dateTimePair})
}

// FuzzFastAgrees runs fastAgreesPair on the fuzzer's capsules.
func FuzzFastAgrees(f *testing.F) { differential.Fuzz(f, fastAgreesPair) }

// TestFastAgreesOnListLengths holds the list limits (a loop round's
// findings) to the library either side of each limit.
func TestFastAgreesOnListLengths(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/capsule_full.json")
	require.NoError(t, err)
	for _, n := range []int{0, 1, 15, 16, 17, 40} {
		doc, err := decode(raw)
		require.NoError(t, err)
		chain := doc.(map[string]any)["chain"].(map[string]any)
		one := chain["findings"].([]any)[0]
		list := make([]any, n)
		for i := range list {
			list[i] = one
		}
		chain["findings"] = list
		require.Equal(t, n <= 16, checkAgreement(t, doc), "%d findings", n)
	}
}

// TestFastAgreesOnNeighbours checks capsules one step away from
// testdata/capsule_full.json (a valid capsule with every member the schema
// declares): each member or item removed, each member name added to each
// object, each value replaced by a third of the palette (a different third
// at each place, so every value is written at some third of the places).
func TestFastAgreesOnNeighbours(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/capsule_full.json")
	require.NoError(t, err)
	base, err := decode(raw)
	require.NoError(t, err)
	require.True(t, fastCapsule().valid(base))
	var places []place
	collect(base, nil, &places)
	var valid, total int
	check := func(p place, op byte, what int) {
		doc, _ := decode(raw)
		total++
		if checkAgreement(t, mutateAt(doc, p, op, what)) {
			valid++
		}
	}
	for i, p := range places {
		check(p, 1, 0)
		for what := i % 3; what < len(palette); what += 3 {
			check(p, 0, what)
		}
		if _, ok := p.get(base).(map[string]any); ok {
			for what := range 2 * len(memberNames) {
				check(p, 2, what)
			}
		}
	}
	t.Logf("%d of %d neighbours valid", valid, total)
	require.Positive(t, valid)
}

// checkAgreement runs fastAgreesPair on doc and reports the library's
// verdict.
func checkAgreement(t *testing.T, doc any) bool {
	t.Helper()
	fastAgreesPair.Check(t, doc)
	v, err := fastAgreesPair.Reference(doc)
	require.NoError(t, err)
	return v.valid
}

func show(doc any) string {
	b, _ := json.Marshal(doc)
	return string(b)
}

// hasNonPlainNumber reports whether a number the fast path leaves to the
// library (a fraction, an exponent, past int64) sits anywhere in v.
func hasNonPlainNumber(v any) bool {
	switch x := v.(type) {
	case json.Number:
		_, ok := plainInt(x)
		return !ok
	case map[string]any:
		for _, e := range x {
			if hasNonPlainNumber(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasNonPlainNumber(e) {
				return true
			}
		}
	}
	return false
}

// seedDocs returns the example capsules and the RECEPTION and capsule fuzz
// corpora's inputs.
func seedDocs(testing.TB) [][]byte {
	var out [][]byte
	for _, glob := range []string{"testdata/*.json", "../examples/capsules/*.json"} {
		files, _ := filepath.Glob(glob)
		for _, name := range files {
			if b, err := os.ReadFile(name); err == nil {
				out = append(out, b)
			}
		}
	}
	for _, dir := range []string{"../phases/testdata/fuzz/FuzzReceive", "../capsule/testdata/fuzz/FuzzDecodeCapsule"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, name := range files {
			b, err := os.ReadFile(name)
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(b), "\n") {
				lit, ok := strings.CutPrefix(line, "[]byte(")
				if !ok || !strings.HasSuffix(lit, ")") {
					continue
				}
				if s, err := strconv.Unquote(strings.TrimSuffix(lit, ")")); err == nil {
					out = append(out, []byte(s))
				}
			}
		}
	}
	return out
}

// mutate changes one place of doc: which place (of every value in it, in a
// fixed order), what to do and with what value are read from the three bytes.
func mutate(doc any, where, op, what byte) any {
	var places []place
	collect(doc, nil, &places)
	return mutateAt(doc, places[int(where)%len(places)], op, int(what))
}

func mutateAt(doc any, p place, op byte, what int) any {
	switch op % 4 {
	case 0: // replace the value
		return p.set(doc, palette[what%len(palette)]())
	case 1: // remove the member or item
		return p.remove(doc)
	case 2: // add a member, known or not, to an object, with a value that may fit it
		if obj, ok := p.get(doc).(map[string]any); ok {
			name := memberNames[what%len(memberNames)]
			obj[name] = fitting(name, what/len(memberNames))
		}
		return doc
	default: // append to an array
		if list, ok := p.get(doc).([]any); ok {
			return p.set(doc, append(list, palette[what%len(palette)]()))
		}
		return doc
	}
}

// fitting returns, for i == 0, the value the full seed capsule has under
// a member of that name (so an added member is often valid), else a
// palette value.
func fitting(name string, i int) any {
	if i == 0 {
		if b, ok := fullMembers[name]; ok {
			v, _ := decode(b) // a fresh copy: a shared map could be made to hold itself
			return v
		}
	}
	return palette[i%len(palette)]()
}

// fullMembers are the members of testdata/capsule_full.json, at any depth,
// encoded.
var fullMembers = func() map[string][]byte {
	raw, err := os.ReadFile("testdata/capsule_full.json")
	if err != nil {
		panic(err)
	}
	doc, err := decode(raw)
	if err != nil {
		panic(err)
	}
	out := map[string][]byte{}
	var walk func(v any)
	walk = func(v any) {
		if obj, ok := v.(map[string]any); ok {
			for k, e := range obj {
				out[k], _ = json.Marshal(e)
				walk(e)
			}
		}
	}
	walk(doc)
	return out
}()

// place is a path of member names (string) and indexes (int).
type place []any

func collect(v any, at place, out *[]place) {
	*out = append(*out, slices.Clone(at))
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			collect(x[k], append(at, k), out)
		}
	case []any:
		for i, e := range x {
			collect(e, append(at, i), out)
		}
	}
}

func (p place) get(doc any) any {
	for _, step := range p {
		switch s := step.(type) {
		case string:
			doc = doc.(map[string]any)[s]
		case int:
			doc = doc.([]any)[s]
		}
	}
	return doc
}

// set replaces the value at p and returns the (possibly new) root.
func (p place) set(doc, v any) any {
	if len(p) == 0 {
		return v
	}
	parent := p[:len(p)-1].get(doc)
	switch s := p[len(p)-1].(type) {
	case string:
		parent.(map[string]any)[s] = v
	case int:
		parent.([]any)[s] = v
	}
	return doc
}

func (p place) remove(doc any) any {
	if len(p) == 0 {
		return doc
	}
	parent := p[:len(p)-1].get(doc)
	switch s := p[len(p)-1].(type) {
	case string:
		delete(parent.(map[string]any), s)
	case int:
		list := parent.([]any)
		return p[:len(p)-1].set(doc, slices.Delete(slices.Clone(list), s, s+1))
	}
	return doc
}

// memberNames are every member name capsule.schema.json declares, and a
// few it does not; read from the schema so that a new member is mutated too.
var memberNames = func() []string {
	names := []string{"extra", "", "Capsule_ID"}
	walkSchema(func(k string, v any) {
		if props, ok := v.(map[string]any); ok && k == "properties" {
			for name := range props {
				names = append(names, name)
			}
		}
	})
	slices.Sort(names)
	return slices.Compact(names)
}()

// schemaEdges are the lengths, minimums and constants capsule.schema.json
// sets, one either side of each limit.
var schemaEdges = func() (lengths []int, numbers []string, consts []any) {
	walkSchema(func(k string, v any) {
		switch k {
		case "minLength", "maxLength", "minimum":
			n, _ := v.(json.Number).Int64()
			for _, e := range []int64{n - 1, n, n + 1} {
				if e > 0 {
					lengths = append(lengths, int(e))
				}
				numbers = append(numbers, strconv.FormatInt(e, 10), strconv.FormatInt(e, 10)+".0")
			}
		case "enum":
			consts = append(consts, v.([]any)...)
		case "const":
			consts = append(consts, v)
		}
	})
	slices.Sort(lengths)
	return slices.Compact(lengths), numbers, consts
}

// walkSchema calls fn with every keyword and value in capsule.schema.json.
func walkSchema(fn func(k string, v any)) {
	src, err := decode(Source(Capsule))
	if err != nil {
		panic(err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			// In a fixed order, so that a fuzz input means the same mutation on every run.
			for _, k := range slices.Sorted(maps.Keys(x)) {
				fn(k, x[k])
				walk(x[k])
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(src)
}

// palette holds the values a mutation writes: each call makes a fresh one,
// so no two places share a map or a slice.
var palette = func() []func() any {
	var out []func() any
	val := func(v any) { out = append(out, func() any { return v }) }
	for _, s := range []string{
		"", "a", "1.0", "01.2", "1.", "1.0\n", "12345678901234567.1", "none", "restricted", "all", "operator",
		"Restricted", "all ", "file:x", "a_b-c", "a b", "stub", "Stub", "s.t-u_b", ".stub", "-x", "x\n",
		"5a6a0000-0000-4000-8000-000000000000", "5A6A0000-0000-4000-8000-00000000000F",
		"5a6a0000-0000-4000-8000-00000000000", "5a6a0000-0000-4000-8000-000000000000\n",
		"01ARZ3NDEKTSV4RRFFQ69G5FAV", "01ARZ3NDEKTSV4RRFFQ69G5FAI", "01arz3ndektsv4rrffq69g5fav",
		strings.Repeat("0", 64), strings.Repeat("f", 64), strings.Repeat("F", 64), strings.Repeat("a", 63),
		strings.Repeat("0", 64) + "\n",
		"2030-01-01T00:00:00Z", "2030-01-01t00:00:00z", "2030-01-01T00:00:00.123+02:00", "2030-02-30T00:00:00Z",
		"2030-01-01T23:59:60Z", "2030-01-01T24:00:00Z", "2030-01-01 00:00:00Z", "2030-01-01T00:00:00",
		"2030-01-01T00:00:00+25:00", "2030-1-01T00:00:00Z", "2030-01-01T00:00:00.Z",
	} {
		val(s)
	}
	// Lengths at every limit the schema sets, in one- and two-byte code
	// points, and its numbers and constants.
	lengths, numbers, consts := schemaEdges()
	for _, n := range lengths {
		val(strings.Repeat("x", n))
		val(strings.Repeat("é", n))
	}
	for _, n := range numbers {
		val(json.Number(n))
	}
	for _, c := range consts {
		val(c)
	}
	val(strings.Repeat("x", 127) + "\xff")
	for _, n := range []string{"0", "1", "2", "3", "-1", "-0", "1.0", "2.0", "1e2", "1E0", "-1e0", "1.5", "0.5",
		"99999999999999999999", "-99999999999999999999", "9223372036854775807", "123456789012345678", "1e400",
		"1e2000000", "0e2000000", "1.5e-2000000"} {
		val(json.Number(n))
	}
	val(true)
	val(false)
	val(nil)
	out = append(out,
		func() any { return map[string]any{} },
		func() any { return []any{} },
		func() any { return []any{"a", "b"} },
		func() any { return []any{""} },
		func() any { return []any{json.Number("1")} },
		func() any { return map[string]any{"mode": "none"} },
		func() any { return map[string]any{"mode": "restricted", "allow_hosts": []any{"x"}} },
		func() any { return map[string]any{"id": "c", "step": json.Number("0")} },
		func() any { return map[string]any{"sha256": strings.Repeat("a", 64)} },
		func() any { return map[string]any{"kind": "stub", "title": "t"} },
		func() any { return map[string]any{"approved": true} },
		func() any { return map[string]any{"tokens": json.Number("1"), "dollars": json.Number("1.5")} },
	)
	return out
}()

// TestRatParses holds ratParses to math/big at the edges it models.
func TestRatParses(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"0", "-0", "1", "-1", "1.5", "1e5", "1E+5", "1e-5", "0e99999999", "0.0e-99999999",
		"0e99999999999999999999", "1e99999999999999999999", "1e1000000", "1e1000001", "-1e1000001",
		"1e-1000000", "1e-1000001", "1.5e1000001", "1.55e1000001", "0.5e-999999", "0.5e-1000000",
		"10e1000000", "123456789e-1000009", "123456789e-1000010", "1e9223372036854775807",
	} {
		_, want := new(big.Rat).SetString(s)
		require.Equal(t, want, ratParses(s), s)
	}
}

// TestHugeNumbersHalt plays a producer whose integer members have exponents
// math/big refuses: the library dereferenced the nil it got and panicked,
// which took sagad down at RECEPTION (and again at every redelivery).
func TestHugeNumbersHalt(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/capsule_full.json")
	require.NoError(t, err)
	for member, ptr := range map[string]string{
		`"tokens": 10000`: "/budget/tokens", `"max_cycles": 3`: "/review/max_cycles",
		`"step": 0`: "/chain/step", `"run": 2`: "/chain/run",
	} {
		name, _, _ := strings.Cut(member, ":")
		bad := strings.Replace(string(raw), member, name+": 1e2000000", 1)
		var verr *ValidationError
		require.ErrorAs(t, Validate(Capsule, []byte(bad)), &verr, member)
		require.Equal(t, []string{ptr}, verr.Pointers)
		require.Equal(t, []string{ptr + ": number out of range"}, verr.Details)
	}
	// The same numbers where the schema never reads them stay valid.
	ok := strings.Replace(string(raw), `"n": 1.5`, `"n": 1e2000000`, 1)
	require.NoError(t, Validate(Capsule, []byte(ok)))
	ok = strings.Replace(string(raw), `"dollars": 5`, `"dollars": 1e2000000`, 1)
	require.NoError(t, Validate(Capsule, []byte(ok)))
}

// TestHugeNumbersEverySchema: the composition document (saga.compose, read
// by sagad) has integer and exclusiveMinimum members too, and no fast
// checker; the library's panic on them becomes a finding.
func TestHugeNumbersEverySchema(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../examples/compositions/translations.json")
	require.NoError(t, err)
	require.NoError(t, Validate(Composition, raw))
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw, &doc))
	for _, member := range []string{"tokens", "dollars"} {
		doc["budget"] = map[string]any{member: json.Number("1e2000000")}
		bad, err := json.Marshal(doc)
		require.NoError(t, err)
		var verr *ValidationError
		require.ErrorAs(t, Validate(Composition, bad), &verr, member)
		require.Equal(t, []string{"/budget/" + member}, verr.Pointers)
		require.Equal(t, []string{"/budget/" + member + ": number out of range"}, verr.Details)
	}
	// A document sent on saga.compose holds every number to the bound,
	// even where the library would not read it (a template's metadata):
	// no fast tree says where it reads.
	delete(doc, "budget")
	step := doc["steps"].([]any)[0].(map[string]any)["capsule"].(map[string]any)
	for _, n := range []string{"1e2000000", "1e999999", "1e401", "1e-401"} {
		step["metadata"] = map[string]any{"n": json.Number(n)}
		far, err := json.Marshal(doc)
		require.NoError(t, err)
		var verr *ValidationError
		require.ErrorAs(t, Validate(Composition, far), &verr, n)
		require.Equal(t, []string{"/steps/0/capsule/metadata/n"}, verr.Pointers, n)
	}
	step["metadata"] = map[string]any{"n": json.Number("1e400")}
	ok, err := json.Marshal(doc)
	require.NoError(t, err)
	require.NoError(t, Validate(Composition, ok), "within the bound, the library's verdict")
}

// TestSlowNumbersHalt plays a producer whose capsule's integer members
// have exponents math/big does hold, at a cost: 1e999999 is about 17 ms
// to read, and the capsule schema reads 21 such members (budget, review,
// chain, 16 findings' rules), 0.75 s of a core for a 3 KB capsule, every
// delivery. A member past maxReadExponent is out of range before the
// library reads anything; within it, the library's verdict stands.
func TestSlowNumbersHalt(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/capsule_full.json")
	require.NoError(t, err)
	for _, n := range []string{"1e999999", "1e401", "-1e401", "1e-401", "1.5e-401"} {
		bad := strings.Replace(string(raw), `"tokens": 10000`, `"tokens": `+n, 1)
		var verr *ValidationError
		require.ErrorAs(t, Validate(Capsule, []byte(bad)), &verr, n)
		require.Equal(t, []string{"/budget/tokens"}, verr.Pointers, n)
		require.Equal(t, []string{"/budget/tokens: number out of range"}, verr.Details, n)
	}
	for _, n := range []string{"1e400", "0e999999", "100e398"} {
		ok := strings.Replace(string(raw), `"tokens": 10000`, `"tokens": `+n, 1)
		require.NoError(t, Validate(Capsule, []byte(ok)), n)
	}
}
