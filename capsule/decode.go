package capsule

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"
)

// Document is a JSON text read once by [ParseDocument]: its value, which
// the schema and the digest take, and where the members of its top-level
// object and of that object's objects lie in the text. [Document.Capsule]
// fills a [Capsule] from the value, so RECEPTION does not read a capsule's
// bytes a second time with encoding/json; the few members encoding/json
// hands to a decoder of their own as written (times, the operator gate,
// metadata) are taken from the text.
type Document struct {
	// Value is what [ParseJSON] returns for the same text.
	Value any
	raw   []byte
	spans []span
}

// ParseDocument is [ParseJSON], keeping the text and where its members lie.
// raw must not change while the Document is used.
func ParseDocument(raw []byte) (Document, error) {
	s := scanner{b: raw}
	if len(raw) <= math.MaxInt32 {
		// A capsule has about 35 members at the two depths noted: room
		// for them makes the list one allocation, of 640 bytes. (Past
		// 2 GiB nothing is noted, and Capsule leaves the text to
		// encoding/json.)
		s.spans = make([]span, 0, 40)
	}
	v, err := s.document()
	if err != nil {
		return Document{}, err
	}
	return Document{Value: v, raw: raw, spans: s.spans}, nil
}

// Capsule returns the Capsule json.Unmarshal makes of the document's text,
// filled from Value. ok is false when the text is not an object or holds
// something this does not read exactly as encoding/json does: a member name
// it does not know (encoding/json would also match other cases of a name),
// a null, a value of another type than its field's, a number its field
// cannot hold, a time or gate whose decoder refuses its bytes. The caller
// then decodes the text with encoding/json, which gives the capsule or the
// error it always gave. FuzzDocumentCapsule holds the two to each other.
func (d *Document) Capsule() (c *Capsule, ok bool) {
	obj, isObj := d.Value.(map[string]any)
	if !isObj {
		return nil, false
	}
	x := filler{doc: d, ok: true}
	c = new(Capsule)
	for name, v := range obj {
		x.member(c, name, v)
		if !x.ok {
			return nil, false
		}
	}
	return c, true
}

// filler fills a Capsule from a Document's value; ok turns false at the
// first thing it cannot fill as encoding/json would.
type filler struct {
	doc *Document
	ok  bool
}

// member fills the top-level member name.
func (x *filler) member(c *Capsule, name string, v any) {
	switch name {
	case "schema_version":
		c.SchemaVersion = x.str(v)
	case "capsule_id":
		c.CapsuleID = x.str(v)
	case "wave_id":
		c.WaveID = x.str(v)
	case "trace_id":
		c.TraceID = x.str(v)
	case "created_at":
		x.time(&c.CreatedAt, v, x.doc.top(name))
	case "deadline":
		x.time(&c.Deadline, v, x.doc.top(name))
	case "producer_agent_id":
		c.ProducerAgentID = x.str(v)
	case "task":
		x.task(&c.Task, v)
	case "spec":
		x.spec(&c.Spec, v, x.doc.top(name))
	case "context_refs":
		c.ContextRefs = x.strs(v)
	case "target":
		c.Target = x.str(v)
	case "constraints":
		x.constraints(&c.Constraints, v)
	case "budget":
		x.budget(&c.Budget, v)
	case "review":
		x.review(&c.Review, v, x.doc.top(name))
	case "depends_on":
		c.DependsOn = x.strs(v)
	case "chain":
		c.Chain = x.chain(v)
	case "metadata":
		c.Metadata = x.raw(v, x.doc.top(name))
	case "integrity":
		x.integrity(&c.Integrity, v)
	case "parent_capsule_id":
		c.ParentCapsuleID = x.str(v)
	default:
		x.ok = false
	}
}

func (x *filler) task(t *Task, v any) {
	for name, e := range x.object(v) {
		switch name {
		case "kind":
			t.Kind = x.str(e)
		case "title":
			t.Title = x.str(e)
		case "description":
			t.Description = x.str(e)
		case "model":
			t.Model = x.str(e)
		default:
			x.ok = false
		}
	}
}

// spec fills the spec member, whose span is at.
func (x *filler) spec(s *Spec, v any, at int) {
	for name, e := range x.object(v) {
		switch name {
		case "approved":
			s.Approved = x.boolean(e)
		case "approved_by":
			s.ApprovedBy = x.str(e)
		case "approved_at":
			s.ApprovedAt = new(time.Time)
			x.time(s.ApprovedAt, e, x.doc.in(at, name))
		case "acceptance_criteria":
			s.AcceptanceCriteria = x.strs(e)
		case "problem_statement":
			s.ProblemStatement = x.str(e)
		case "definition_of_done":
			s.DefinitionOfDone = x.str(e)
		default:
			x.ok = false
		}
	}
}

func (x *filler) constraints(c *Constraints, v any) {
	for name, e := range x.object(v) {
		switch name {
		case "resource_locks_required":
			c.ResourceLocksRequired = x.strs(e)
		case "allowed_paths":
			c.AllowedPaths = x.strs(e)
		case "forbidden_paths":
			c.ForbiddenPaths = x.strs(e)
		case "network":
			x.network(&c.Network, e)
		case "destructive":
			c.Destructive = x.boolean(e)
		default:
			x.ok = false
		}
	}
}

func (x *filler) network(n *Network, v any) {
	for name, e := range x.object(v) {
		switch name {
		case "mode":
			n.Mode = x.str(e)
		case "justification":
			n.Justification = x.str(e)
		case "allow_hosts":
			n.AllowHosts = x.strs(e)
		default:
			x.ok = false
		}
	}
}

func (x *filler) budget(b *Budget, v any) {
	for name, e := range x.object(v) {
		switch name {
		case "tokens":
			b.Tokens = x.integer(e, 64)
		case "dollars":
			b.Dollars = x.float(e)
		case "child":
			b.Child = new(ChildBudget)
			for name, e := range x.object(e) {
				switch name {
				case "max_attempts":
					b.Child.MaxAttempts = int(x.integer(e, strconv.IntSize))
				case "max_wall_time":
					b.Child.MaxWallTime = x.str(e)
				default:
					x.ok = false
				}
			}
		default:
			x.ok = false
		}
	}
}

// review fills the review member, whose span is at.
func (x *filler) review(r *ReviewPolicy, v any, at int) {
	for name, e := range x.object(v) {
		switch name {
		case "reviewer_agent_id":
			r.ReviewerAgentID = x.str(e)
		case "max_cycles":
			r.MaxCycles = int(x.integer(e, strconv.IntSize))
		case "operator_gate":
			// Gate's own decoder takes the bytes as written, as
			// encoding/json hands them to it: "all" spelled with an escape
			// is refused there, and so here.
			if sp := x.doc.in(at, name); e != nil && sp >= 0 {
				x.ok = x.ok && r.OperatorGate.UnmarshalJSON(x.doc.bytes(sp)) == nil
			} else {
				x.ok = false
			}
		default:
			x.ok = false
		}
	}
}

func (x *filler) chain(v any) *ChainRound {
	ch := new(ChainRound)
	for name, e := range x.object(v) {
		switch name {
		case "id":
			ch.ID = x.str(e)
		case "step":
			ch.Step = int(x.integer(e, strconv.IntSize))
		case "run":
			ch.Run = int(x.integer(e, strconv.IntSize))
		case "gate":
			ch.Gate = x.str(e)
		case "round":
			ch.Round = int(x.integer(e, strconv.IntSize))
		case "findings":
			ch.Findings = x.findings(e)
		case "prior_artifact":
			ch.PriorArtifact = x.str(e)
		default:
			x.ok = false
		}
	}
	return ch
}

func (x *filler) findings(v any) []Finding {
	list, isList := v.([]any)
	if !isList {
		x.ok = false
		return nil
	}
	out := make([]Finding, len(list))
	for i, e := range list {
		x.finding(&out[i], e)
	}
	return out
}

func (x *filler) finding(f *Finding, v any) {
	for name, e := range x.object(v) {
		switch name {
		case "rule":
			f.Rule = int(x.integer(e, strconv.IntSize))
		case "title":
			f.Title = x.str(e)
		case "field":
			f.Field = x.str(e)
		case "message":
			f.Message = x.str(e)
		case "source":
			f.Source = x.str(e)
		case "severity":
			f.Severity = x.str(e)
		default:
			x.ok = false
		}
	}
}

func (x *filler) integrity(in *Integrity, v any) {
	for name, e := range x.object(v) {
		switch name {
		case "sha256":
			in.SHA256 = x.str(e)
		default:
			x.ok = false
		}
	}
}

// object is v as an object; any other value (null included) fails, and
// ranging over the nil it returns then does nothing.
func (x *filler) object(v any) map[string]any {
	obj, isObj := v.(map[string]any)
	if !isObj {
		x.ok = false
	}
	return obj
}

func (x *filler) str(v any) string {
	s, isStr := v.(string)
	if !isStr {
		x.ok = false
	}
	return s
}

func (x *filler) boolean(v any) bool {
	b, isBool := v.(bool)
	if !isBool {
		x.ok = false
	}
	return b
}

// strs is v as a list of strings; an empty list is an empty slice, not
// nil, as encoding/json makes it.
func (x *filler) strs(v any) []string {
	list, isList := v.([]any)
	if !isList {
		x.ok = false
		return nil
	}
	out := make([]string, len(list))
	for i, e := range list {
		out[i] = x.str(e)
	}
	return out
}

// integer reads v as encoding/json reads a number into an integer field of
// bits bits: strconv.ParseInt of the number as written, so 1.0, 1e2 and
// numbers out of range fail, as they fail there.
func (x *filler) integer(v any, bits int) int64 {
	n, isNum := v.(json.Number)
	if !isNum {
		x.ok = false
		return 0
	}
	i, err := strconv.ParseInt(string(n), 10, bits)
	if err != nil {
		x.ok = false
	}
	return i
}

// float reads v as encoding/json reads a number into a float64 field.
func (x *filler) float(v any) float64 {
	n, isNum := v.(json.Number)
	if !isNum {
		x.ok = false
		return 0
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		x.ok = false
	}
	return f
}

// time decodes the member at span sp with time.Time's own decoder, on its
// bytes as written, as encoding/json does: that decoder does not undo
// escapes, so a time with one is refused there, and so here.
func (x *filler) time(t *time.Time, v any, sp int) {
	if _, isStr := v.(string); !isStr || sp < 0 {
		x.ok = false
		return
	}
	x.ok = x.ok && t.UnmarshalJSON(x.doc.bytes(sp)) == nil
}

// raw is the bytes of the member at span sp, copied (they outlive the
// message they came in), as json.RawMessage keeps them.
func (x *filler) raw(v any, sp int) json.RawMessage {
	if v == nil || sp < 0 {
		x.ok = false
		return nil
	}
	return append(json.RawMessage(nil), x.doc.bytes(sp)...)
}

// top is the index of the span of the top-level member name, or -1.
func (d *Document) top(name string) int { return d.find(-1, name) }

// in is the index of the span of member name of the object that is the
// top-level member at parent, or -1.
func (d *Document) in(parent int, name string) int {
	if parent < 0 {
		return -1
	}
	return d.find(parent, name)
}

func (d *Document) find(parent int, name string) int {
	for i := range d.spans {
		if int(d.spans[i].parent) == parent && d.named(d.spans[i].key, name) {
			return i
		}
	}
	return -1
}

// named reports whether the member name whose opening quote is at key is
// name: compared as written, or, when written with an escape, decoded as
// the parse decoded it.
func (d *Document) named(key int32, name string) bool {
	written := d.raw[key+1:]
	if len(written) > len(name) && written[len(name)] == '"' && string(written[:len(name)]) == name {
		return true
	}
	// A backslash before the first quote is the first escape of the name
	// (an escaped quote has one before it); without one, it is not name.
	if q := bytes.IndexByte(written, '"'); q < 0 || bytes.IndexByte(written[:q], '\\') < 0 {
		return false
	}
	s := scanner{b: d.raw, i: int(key)}
	decoded, err := s.str()
	return err == nil && decoded == name
}

func (d *Document) bytes(sp int) []byte { return d.raw[d.spans[sp].start:d.spans[sp].end] }
