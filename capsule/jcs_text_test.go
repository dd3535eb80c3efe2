package capsule

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/differential"
)

// sameDigest holds Document.Digest to digestObject on raw, and reports
// whether the text was hashed as written.
func sameDigest(t *testing.T, raw []byte) (fromText bool) {
	t.Helper()
	doc, ok := parsedObject(raw)
	if !ok {
		return false
	}
	documentDigestPair.Check(t, doc)
	var b bytes.Buffer
	w := textWalker{b: raw, out: &b}
	return w.value(true)
}

// TestTextDigestAgrees: random objects (odd spellings, escapes, exponents,
// an integrity member at the top and below), as written, in canonical form
// and in canonical form indented: the same digest either way, and the
// canonical texts, indented or not, are hashed as written.
func TestTextDigestAgrees(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(13, 17))
	var docs [][]byte
	for range 3000 {
		var b strings.Builder
		b.WriteString(`{"a":`)
		randJSON(r, &b, 1)
		b.WriteString(`,"integrity":`)
		randJSON(r, &b, 1)
		b.WriteString(`,"m":{"integrity":`)
		randJSON(r, &b, 2)
		b.WriteString(`},"` + []string{"0", "b", "j", "z"}[r.IntN(4)] + `":`)
		randJSON(r, &b, 1)
		b.WriteString(`}`)
		docs = append(docs, []byte(b.String()))
	}
	files, err := filepath.Glob("../examples/capsules/*.json")
	require.NoError(t, err)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		docs = append(docs, raw)
		// A capsule as Seal (sagactl publish) writes it is hashed as written.
		if sealed, err := Seal(raw); err == nil {
			require.True(t, sameDigest(t, sealed), "%s sealed: %s", f, sealed)
		}
	}
	canonical := 0
	for _, raw := range docs {
		sameDigest(t, raw)
		canon, err := Canonicalize(raw)
		if err != nil {
			continue
		}
		canonical++
		require.True(t, sameDigest(t, canon), "canonical text not hashed as written: %s", canon)
		var indented bytes.Buffer
		require.NoError(t, json.Indent(&indented, canon, " ", "\t"))
		require.True(t, sameDigest(t, indented.Bytes()), "%s", indented.Bytes())
	}
	require.Greater(t, canonical, 1000)
}

// TestTextDigestRefuses: each spelling the canonical form writes otherwise
// takes the tree's path (and the same digest).
func TestTextDigestRefuses(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		`{"b":1,"a":2}`, `{"a":1.0}`, `{"a":1e2}`, `{"a":-0}`, `{"a":0.10}`, `{"a":1E21}`,
		`{"a":"\/"}`, `{"a":"\u0041"}`, `{"a":"\u000A"}`, `{"a":"\u000a"}`, `{"a":"\u001F"}`,
		`{"a":"\u2028"}`, `{"\u0061":1}`, `{"é":1}`, `{"a":{"d":1,"c":2}}`, `{"a":[{"y":1,"x":2}]}`,
		`{"a":12345678901234567890}`, `{"a":1e400}`, `{"integrity":{"sha256":"\u0030"},"z":1}`,
	} {
		require.False(t, sameDigest(t, []byte(raw)), raw)
	}
	for _, raw := range []string{
		`{"a":"\u001f\u0000\b\f\n\r\t\"\\"}`, `{"a":-5,"b":0.5,"c":1e+21,"d":1.5e-7,"e":-0.25}`,
		` { "integrity" : {"sha256":"x"} , "z" : [ 1 , { } , [ ] ] } `, `{"b":1,"integrity":2}`,
		"{\"a\":\"é😀\u2028\"}",
	} {
		require.True(t, sameDigest(t, []byte(raw)), raw)
	}
}

// parsedObject is raw parsed, if it is a JSON object.
func parsedObject(raw []byte) (*Document, bool) {
	doc, err := ParseDocument(raw)
	if err != nil {
		return nil, false
	}
	_, isObj := doc.Value.(map[string]any)
	return &doc, isObj
}

// documentDigestPair: Document.Digest (from the text when it is canonical
// but for whitespace, else the tree) is digestObject of the parsed value,
// and fails exactly when it does. Seeds: the example capsules, as written
// and sealed; TestTextDigestAgrees adds random objects written three ways.
var documentDigestPair = differential.Pair[*Document, string]{
	Name:      "DocumentDigest",
	Fast:      func(d *Document) (string, error) { return d.Digest() },
	Reference: func(d *Document) (string, error) { return digestObject(d.Value.(map[string]any)) },
	Seeds: func() (out []*Document) {
		raws := [][]byte{[]byte(`{"a":"\u001f","b":-5,"c":1e+21,"integrity":{}}`)}
		for _, raw := range exampleCapsules() {
			raws = append(raws, raw)
			if sealed, err := Seal(raw); err == nil {
				raws = append(raws, sealed)
			}
		}
		for _, raw := range raws {
			if d, ok := parsedObject(raw); ok {
				out = append(out, d)
			}
		}
		return out
	}(),
	Decode: parsedObject,
	Encode: func(d *Document) []byte { return d.raw },
}

// FuzzDocumentDigest: on any bytes that are an object, Document.Digest is
// digestObject of the parsed value. Seeds: the pair's and
// testdata/fuzz/FuzzDocumentDigest.
func FuzzDocumentDigest(f *testing.F) { differential.Fuzz(f, documentDigestPair) }
