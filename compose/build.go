package compose

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/schemas"
)

// Doc is a chain document (schemas/chain.schema.json), checked.
type Doc struct {
	ChainID string
	steps   []json.RawMessage
}

// Steps is how many steps the document has.
func (d *Doc) Steps() int { return len(d.steps) }

// Parse checks b against the chain schema and returns the document.
func Parse(b []byte) (*Doc, error) {
	if err := schemas.Validate(schemas.Chain, b); err != nil {
		return nil, fmt.Errorf("not a chain: %w", err)
	}
	var doc struct {
		ChainID string            `json:"chain_id"`
		Steps   []json.RawMessage `json:"steps"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("not a chain: %w", err)
	}
	return &Doc{ChainID: doc.ChainID, steps: doc.Steps}, nil
}

// NewStepIDs returns n fresh capsule ids: random UUIDs (version 4), so
// that nobody can know a step's id before sagad publishes the step.
func NewStepIDs(n int) ([]string, error) {
	ids := make([]string, n)
	for i := range ids {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("step ids: %w", err)
		}
		b[6] = b[6]&0x0f | 0x40 // version 4
		b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
		ids[i] = fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	}
	return ids, nil
}

// Build makes the document's steps into sealed capsules under ids, in
// order: each carries chain {id, step}, depends on the step before and
// reads its final artifact (context ref artifact:<previous id>/final). The
// same document and ids always build the same bytes. digests are the
// capsules' integrity digests.
func (d *Doc) Build(ids []string) (capsules [][]byte, digests []string, err error) {
	if len(ids) != len(d.steps) {
		return nil, nil, fmt.Errorf("%d ids for %d steps", len(ids), len(d.steps))
	}
	prev := ""
	for i, raw := range d.steps {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber() // numbers stay as written: they are digested
		var step map[string]any
		if err := dec.Decode(&step); err != nil {
			return nil, nil, fmt.Errorf("step %d: %w", i, err)
		}
		id := ids[i]
		step["capsule_id"] = id
		step["chain"] = map[string]any{"id": d.ChainID, "step": i}
		refs, _ := step["context_refs"].([]any)
		if refs == nil {
			refs = []any{}
		}
		if prev != "" {
			step["depends_on"] = []any{prev}
			final := "artifact:" + prev + "/final"
			if !slices.Contains(refs, any(final)) {
				refs = append(refs, final)
			}
		}
		step["context_refs"] = refs
		delete(step, "integrity")
		unsealed, err := json.Marshal(step)
		if err != nil {
			return nil, nil, fmt.Errorf("step %d: %w", i, err)
		}
		sealed, err := capsule.Seal(unsealed)
		if err != nil {
			return nil, nil, fmt.Errorf("step %d: %w", i, err)
		}
		if err := schemas.Validate(schemas.Capsule, sealed); err != nil {
			return nil, nil, fmt.Errorf("step %d: not a capsule: %w", i, err)
		}
		var in struct {
			Integrity struct {
				SHA256 string `json:"sha256"`
			} `json:"integrity"`
		}
		if err := json.Unmarshal(sealed, &in); err != nil {
			return nil, nil, fmt.Errorf("step %d: %w", i, err)
		}
		capsules = append(capsules, sealed)
		digests = append(digests, in.Integrity.SHA256)
		prev = id
	}
	return capsules, digests, nil
}
