package compose

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/schemas"
)

// MaxSteps bounds a composition's steps (composition.schema.json).
const MaxSteps = 256

// GateOperator is the only gate a step may declare: the step's capsule
// carries it (chain.gate) and waits at AUTOMATED_GATES for a person.
const GateOperator = capsule.GateOperator

// StepDef is one step of a document: its name, the steps it needs and its
// capsule template.
type StepDef struct {
	Name  string
	Needs []string
	Gate  string
	tmpl  json.RawMessage
}

// Budget is a composition's ceiling over all its steps.
type Budget struct {
	Tokens  int64   `json:"tokens,omitempty"`
	Dollars float64 `json:"dollars,omitempty"`
}

// Doc is a composition (schemas/composition.schema.json) or a chain
// document (schemas/chain.schema.json) read as one, schema-checked; its
// graph is judged by [Doc.Graph].
type Doc struct {
	// ID is the composition_id, or the chain_id of a chain document.
	ID string
	// Chain is true for a chain document.
	Chain    bool
	Steps    []StepDef
	Budget   *Budget
	Deadline *time.Time
	// Loops are the document's verification loops (see [Check] for what
	// makes one sound, and the package doc for how they run).
	Loops []Loop
}

// Loop is a verification loop of a document (loops[] of the schema).
type Loop struct {
	Steps     []string `json:"steps"`
	Verifier  string   `json:"verifier"`
	MaxRounds int      `json:"max_rounds"`
}

// Parse reads b as a composition when it has a composition_id, else as a
// chain document: a chain's step i is named step-<i> and needs step-<i-1>. A
// schema violation is returned as a *[DocError] whose findings name the
// steps.
func Parse(b []byte) (*Doc, error) {
	var probe struct {
		CompositionID *json.RawMessage `json:"composition_id"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, &DocError{Findings: []Finding{{Step: -1, Finding: capsule.Finding{Message: "not JSON: " + err.Error()}}}}
	}
	// Without a composition_id it is read as a chain document, as it
	// always was: the schema errors then name chain_id.
	if probe.CompositionID == nil {
		return parseChain(b)
	}
	if err := schemas.Validate(schemas.Composition, b); err != nil {
		return nil, schemaError(err)
	}
	var in struct {
		ID    string `json:"composition_id"`
		Steps []struct {
			Name    string          `json:"name"`
			Needs   []string        `json:"needs"`
			Gate    string          `json:"gate"`
			Capsule json.RawMessage `json:"capsule"`
		} `json:"steps"`
		Budget   *Budget    `json:"budget"`
		Deadline *time.Time `json:"deadline"`
		Loops    []Loop     `json:"loops"`
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, schemaError(err)
	}
	d := &Doc{ID: in.ID, Budget: in.Budget, Deadline: in.Deadline, Loops: in.Loops}
	for _, s := range in.Steps {
		d.Steps = append(d.Steps, StepDef{Name: s.Name, Needs: s.Needs, Gate: s.Gate, tmpl: s.Capsule})
	}
	return d, nil
}

func parseChain(b []byte) (*Doc, error) {
	if err := schemas.Validate(schemas.Chain, b); err != nil {
		return nil, schemaError(err)
	}
	var in struct {
		ChainID string            `json:"chain_id"`
		Steps   []json.RawMessage `json:"steps"`
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, schemaError(err)
	}
	d := &Doc{ID: in.ChainID, Chain: true}
	for i, raw := range in.Steps {
		s := StepDef{Name: ChainStepName(i), tmpl: raw}
		if i > 0 {
			s.Needs = []string{ChainStepName(i - 1)}
		}
		d.Steps = append(d.Steps, s)
	}
	return d, nil
}

// WaveID is the wave that holds the budget of the run whose steps have
// ids: named after its first step, so each run has its own.
func WaveID(ids []string) string { return "composition-" + ids[0] }

// ChainStepName is the name of a chain document's step i.
func ChainStepName(i int) string { return "step-" + strconv.Itoa(i) }

// Graph judges the steps as a graph: unique names, needs that name
// another step, no cycle. Every problem is a finding of the step it is in.
func (d *Doc) Graph() []Finding {
	var out []Finding
	index := make(map[string]int, len(d.Steps))
	for i, s := range d.Steps {
		if j, dup := index[s.Name]; dup {
			out = append(out, stepFinding(i, s.Name, "name", "name %q is step %d's too: names are unique", s.Name, j))
			continue
		}
		index[s.Name] = i
	}
	for i, s := range d.Steps {
		for k, n := range s.Needs {
			j, ok := index[n]
			switch {
			case !ok:
				out = append(out, stepFinding(i, s.Name, "needs["+strconv.Itoa(k)+"]", "needs %q: no step has that name", n))
			case j == i:
				out = append(out, stepFinding(i, s.Name, "needs["+strconv.Itoa(k)+"]", "a step cannot need itself"))
			}
		}
	}
	if len(out) > 0 {
		return out
	}
	// Kahn's algorithm: whatever is left once no step is free is on a
	// cycle or waits for one.
	waiting := make([]int, len(d.Steps))
	needers := make([][]int, len(d.Steps))
	for i, s := range d.Steps {
		waiting[i] = len(s.Needs)
		for _, n := range s.Needs {
			needers[index[n]] = append(needers[index[n]], i)
		}
	}
	var free []int
	for i, w := range waiting {
		if w == 0 {
			free = append(free, i)
		}
	}
	done := 0
	for len(free) > 0 {
		i := free[len(free)-1]
		free = free[:len(free)-1]
		done++
		for _, j := range needers[i] {
			if waiting[j]--; waiting[j] == 0 {
				free = append(free, j)
			}
		}
	}
	if done == len(d.Steps) {
		return nil
	}
	for i, w := range waiting {
		if w > 0 {
			out = append(out, stepFinding(i, d.Steps[i].Name, "needs", "on a cycle of needs, or needs a step that is: it could never start"))
		}
	}
	return out
}

// NewStepIDs returns n fresh capsule ids: random UUIDs, so that nobody can
// know a step's id before sagad publishes the step. They are version 8
// (RFC 9562's form for ids of an application's own making), not the
// version 4 producers draw: RECEPTION looks a capsule id up among the
// reserved step ids only when it has this form (store.StepIDForm), so an
// ordinary capsule costs no read.
func NewStepIDs(n int) ([]string, error) {
	ids := make([]string, n)
	for i := range ids {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("step ids: %w", err)
		}
		b[6] = b[6]&0x0f | 0x80 // version 8
		b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
		ids[i] = fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	}
	return ids, nil
}

// Build makes the document's steps into sealed capsules under ids (the
// graph must be sound, see [Doc.Graph]): step i carries chain {id, step: i}
// (and run, from run 2 on), depends on the steps it needs and reads each
// one's final artifact (context ref artifact:<need's id>/final); its
// deadline is brought forward to the composition's; with a composition
// budget, it joins the run's wave ([WaveID]). The same document,
// run and ids always build the same bytes, and a chain document's run 1
// builds what it always did. digests are the capsules' integrity digests.
func (d *Doc) Build(ids []string, run int) (capsules [][]byte, digests []string, err error) {
	if len(ids) != len(d.Steps) {
		return nil, nil, fmt.Errorf("%d ids for %d steps", len(ids), len(d.Steps))
	}
	for i := range d.Steps {
		raw, digest, err := d.buildStep(i, ids, stepBuild{run: run, wave: WaveID(ids)})
		if err != nil {
			return nil, nil, err
		}
		capsules = append(capsules, raw)
		digests = append(digests, digest)
	}
	return capsules, digests, nil
}

// stepBuild is what a step's capsule takes besides its template and ids.
type stepBuild struct {
	run  int
	wave string
	// round (from 2), findings and refs are a verification loop's round:
	// the verifier's findings on the round before and its artifact.
	round    int
	findings []capsule.Finding
	refs     []string
	// prior is the step's own last artifact of the round before, which
	// its round revises ("" for none).
	prior string
	// accepted are the needs that ended without completing in a loop a
	// person accepted, each with its last artifact ref ("" for none).
	accepted map[int]string
}

// buildStep makes step i into a sealed capsule under ids (see [Doc.Build]).
func (d *Doc) buildStep(i int, ids []string, b stepBuild) (raw []byte, digest string, err error) {
	s := d.Steps[i]
	dec := json.NewDecoder(bytes.NewReader(s.tmpl))
	dec.UseNumber() // numbers stay as written: they are digested
	var step map[string]any
	if err := dec.Decode(&step); err != nil {
		return nil, "", fmt.Errorf("step %s: %w", s.Name, err)
	}
	step["capsule_id"] = ids[i]
	step["chain"] = d.chainOf(i, b)
	refs, _ := step["context_refs"].([]any)
	if refs == nil {
		refs = []any{}
	}
	if len(s.Needs) > 0 {
		index := d.index()
		deps := make([]any, 0, len(s.Needs))
		for _, n := range s.Needs {
			j, ok := index[n]
			if !ok {
				return nil, "", fmt.Errorf("step %s: needs unknown step %q", s.Name, n)
			}
			final := "artifact:" + ids[j] + "/final"
			if last, accepted := b.accepted[j]; accepted {
				// Ended without completing, in a loop a person accepted:
				// nothing to wait for, its last artifact to read.
				final = last
			} else {
				deps = append(deps, ids[j])
			}
			if final != "" && !slices.Contains(refs, any(final)) {
				refs = append(refs, final)
			}
		}
		if len(deps) > 0 {
			step["depends_on"] = deps
		}
	}
	for _, r := range b.refs {
		if !slices.Contains(refs, any(r)) {
			refs = append(refs, r)
		}
	}
	step["context_refs"] = refs
	if d.Budget != nil {
		step["wave_id"] = b.wave
	}
	if d.Deadline != nil {
		dl, _ := step["deadline"].(string)
		t, perr := time.Parse(time.RFC3339, dl)
		if perr != nil || t.After(*d.Deadline) {
			step["deadline"] = d.Deadline.UTC().Format(time.RFC3339)
		}
	}
	delete(step, "integrity")
	return seal(s.Name, step)
}

// index maps the steps' names to their indexes.
func (d *Doc) index() map[string]int {
	index := make(map[string]int, len(d.Steps))
	for i, s := range d.Steps {
		index[s.Name] = i
	}
	return index
}

// chainOf is step i's chain object.
func (d *Doc) chainOf(i int, b stepBuild) map[string]any {
	chain := map[string]any{"id": d.ID, "step": i}
	if b.run > 1 {
		chain["run"] = b.run
	}
	if g := d.Steps[i].Gate; g != "" {
		chain["gate"] = g
	}
	if b.round > 1 {
		chain["round"] = b.round
		if len(b.findings) > 0 {
			chain["findings"] = b.findings
		}
		if b.prior != "" {
			chain["prior_artifact"] = b.prior
		}
	}
	return chain
}

// seal seals step's capsule and reads back its digest.
func seal(name string, step map[string]any) ([]byte, string, error) {
	unsealed, err := json.Marshal(step)
	if err != nil {
		return nil, "", fmt.Errorf("step %s: %w", name, err)
	}
	sealed, err := capsule.Seal(unsealed)
	if err != nil {
		return nil, "", fmt.Errorf("step %s: %w", name, err)
	}
	var in struct {
		Integrity struct {
			SHA256 string `json:"sha256"`
		} `json:"integrity"`
	}
	if err := json.Unmarshal(sealed, &in); err != nil {
		return nil, "", fmt.Errorf("step %s: %w", name, err)
	}
	return sealed, in.Integrity.SHA256, nil
}
