package phases

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/schemas"
)

// DefaultMaxIntakeBytes is the hard intake limit when Env.MaxIntakeBytes is 0.
// Rule 10's configurable size limit is lower; this one only protects the daemon.
const DefaultMaxIntakeBytes = 512 * 1024

// Received is what RECEPTION (phase 0) made of the intake bytes.
type Received struct {
	// Capsule is nil when the bytes could not be read as a capsule.
	Capsule *capsule.Capsule
	// ClaimedID is the capsule_id the bytes claim, if any could be read,
	// even when the capsule is otherwise invalid.
	ClaimedID string
	// Digest is the integrity digest computed from the bytes (when JSON).
	Digest   string
	Decision Decision
}

// Receive runs RECEPTION: size, JSON, schema version, schema, list limits
// (capsule.ListLimits), integrity, deadline, budget positivity (tokens, then
// dollars), task.model (model_not_allowed) and lock availability (not for
// a composition's step), in that order; the first failure halts. holder is the checkpoint key the capsule will use.
func Receive(ctx context.Context, env *Env, raw []byte, holder func(id string) string) Received {
	var r Received
	doc, version, stop := r.read(env, raw)
	if stop == nil {
		obj, _ := doc.Value.(map[string]any)
		stop = validate(env, raw, obj, version)
	}
	if stop == nil {
		stop = r.decode(raw, &doc)
	}
	if stop == nil {
		stop = r.check(env)
	}
	if stop == nil && r.Capsule.Chain == nil {
		// Not for a composition's step: sagad publishes a run's steps at
		// once, so a step's lock is often held by the step it needs, or by
		// an earlier run of the same document; refused here it would never
		// own its id and the run would wait for it for ever. It takes its
		// locks at EXECUTION, waiting (--lock-wait, then lock_contention)
		// like any capsule. A capsule only declaring a chain is refused
		// right after (chain membership), so this lets no other one by.
		stop = locksAvailable(ctx, env, r.Capsule, holder)
	}
	if stop != nil {
		r.Decision = *stop
	} else {
		r.Decision = AdvanceWith()
	}
	return r
}

// read checks the size and that the bytes are a JSON object, and reads the
// claimed id, the schema version and the digest. doc is the parsed object,
// its Value nil when only the lenient parse read it.
func (r *Received) read(env *Env, raw []byte) (doc capsule.Document, version string, stop *Decision) {
	limit := env.MaxIntakeBytes
	if limit <= 0 {
		limit = DefaultMaxIntakeBytes
	}
	if len(raw) > limit {
		return doc, "", halt(capsule.CapsuleTooLarge(len(raw)))
	}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return doc, "", halt(capsule.NotJSON())
	}
	// One strict parse serves the digest, the head, the schema and the
	// decode. Bytes it refuses (duplicate keys, unpaired surrogates) take
	// the lenient path: they get no digest, so at worst they halt
	// integrity_mismatch.
	doc, perr := capsule.ParseDocument(raw)
	if obj, isObj := doc.Value.(map[string]any); perr == nil && isObj {
		r.ClaimedID, _ = obj["capsule_id"].(string)
		version, _ = obj["schema_version"].(string)
		if d, err := doc.Digest(); err == nil {
			r.Digest = d
		}
		return doc, version, nil
	}
	var head struct {
		SchemaVersion json.RawMessage `json:"schema_version"`
		CapsuleID     json.RawMessage `json:"capsule_id"`
	}
	if !json.Valid(trimmed) || json.Unmarshal(trimmed, &head) != nil {
		return capsule.Document{}, "", halt(capsule.NotJSON())
	}
	// Decoded into locals: a pointer into r or to a result would move r
	// (and the result) to the heap for every capsule, not only these.
	var id, lenientVersion string
	_ = json.Unmarshal(head.CapsuleID, &id)
	_ = json.Unmarshal(head.SchemaVersion, &lenientVersion)
	r.ClaimedID = id
	return capsule.Document{}, lenientVersion, nil
}

// validate checks the schema version's major, then the capsule schema.
func validate(env *Env, raw []byte, obj map[string]any, version string) *Decision {
	majors := env.Rules.SupportedMajors
	if majors == nil {
		// WithDefaults copies every list of the rules; sagad's Env has
		// them set, so only a zero Config pays for it.
		majors = env.Rules.WithDefaults().SupportedMajors
	}
	if version != "" && !supportsVersion(majors, version) {
		return halt(capsule.UnsupportedSchemaVersion(version))
	}
	var err error
	if obj != nil {
		err = schemas.ValidateDoc(schemas.Capsule, obj)
	} else {
		err = schemas.Validate(schemas.Capsule, raw)
	}
	if err == nil {
		return nil
	}
	var verr *schemas.ValidationError
	if errors.As(err, &verr) {
		// Every bad entry of a long list is a detail: capped, so the
		// checkpoint stays one NATS message.
		return halt(capsule.SchemaInvalid(verr.Pointers),
			capsule.CapFindings(detailsToFindings(verr.Details), capsule.MaxFindings)...)
	}
	if errors.Is(err, schemas.ErrNotJSON) {
		return halt(capsule.NotJSON())
	}
	d := RetryLater(fmt.Errorf("reception: validate: %w", err))
	return &d
}

// decode reads the capsule the schema accepted: from the parsed document
// when it can say what encoding/json would make of the bytes, else with
// encoding/json (the lenient path's bytes, a number or time the schema
// accepts and the struct does not).
func (r *Received) decode(raw []byte, doc *capsule.Document) *Decision {
	c, ok := doc.Capsule()
	if !ok {
		c = new(capsule.Capsule)
		if err := json.Unmarshal(raw, c); err != nil {
			// The schema accepted it, so this is a schema/type mismatch of
			// ours: still the user's bytes are kept and the reason is specific.
			return halt(capsule.SchemaInvalid([]string{"/"}), capsule.Finding{Message: err.Error()})
		}
	}
	c.Canonicalize() // one id whatever its case: the key below and every later phase
	r.Capsule = c
	return nil
}

// check applies the rules the schema cannot: list limits, integrity,
// deadline, budget positivity and budget.child's bounds.
func (r *Received) check(env *Env) *Decision {
	c := r.Capsule
	if l, over := c.ExceededLimit(); over {
		return halt(capsule.CapsuleLimitsExceeded(l.Field), capsule.Finding{
			Field: l.Field, Message: fmt.Sprintf("%s has %d entries, over the limit of %d", l.Field, l.Len, l.Max),
		})
	}
	if r.Digest == "" || c.Integrity.SHA256 != r.Digest {
		return halt(capsule.IntegrityMismatch(), capsule.Finding{
			Field: "integrity.sha256", Message: fmt.Sprintf("declared %q, computed %q", c.Integrity.SHA256, r.Digest),
		})
	}
	if !c.Deadline.After(env.Now()) {
		return halt(capsule.DeadlineInPast(), capsule.Finding{
			Field: "deadline", Message: "deadline " + c.Deadline.UTC().Format("2006-01-02T15:04:05Z07:00") + " has passed",
		})
	}
	if c.Budget.Tokens <= 0 {
		return halt(capsule.BudgetTokensNonPositive(), capsule.Finding{
			Field: "budget.tokens", Message: "budget.tokens is " + strconv.FormatInt(c.Budget.Tokens, 10),
		})
	}
	// budget.dollars is a JSON number, so never NaN or infinite here; the
	// negated test keeps even those out.
	if !(c.Budget.Dollars > 0) {
		return halt(capsule.BudgetDollarsNonPositive(), capsule.Finding{
			Field: "budget.dollars", Message: "budget.dollars is " + strconv.FormatFloat(c.Budget.Dollars, 'g', -1, 64),
		})
	}
	if ptr, why := c.Budget.Child.Invalid(); ptr != "" {
		// Bounds the schema leaves to Go (a duration's value, a range):
		// still the schema's kind of fault.
		return halt(capsule.SchemaInvalid([]string{ptr}), capsule.Finding{Field: "budget.child", Message: why})
	}
	return modelAllowed(env, c)
}

// modelAllowed halts a capsule whose task.model is no tier or model id of
// the models config (docs/MODELS.md): caught here, before anything is
// spent, rather than by the API at EXECUTION.
func modelAllowed(env *Env, c *capsule.Capsule) *Decision {
	if c.Task.Model == "" {
		return nil
	}
	var m executors.Models
	if env.Executors != nil {
		m = env.Executors.Models()
	}
	if err := m.Allowed(c.Task.Model); err != nil {
		return halt(capsule.ModelNotAllowed(c.Task.Model), capsule.Finding{Field: "task.model", Message: err.Error()})
	}
	return nil
}

// locksAvailable checks that no other capsule holds a lock c requires.
func locksAvailable(ctx context.Context, env *Env, c *capsule.Capsule, holder func(id string) string) *Decision {
	for _, p := range c.Constraints.ResourceLocksRequired {
		ok, err := env.Locks.Available(ctx, p, holder(c.CapsuleID))
		if err != nil {
			d := RetryLater(fmt.Errorf("reception: lock %q: %w", p, err))
			return &d
		}
		if !ok {
			return halt(capsule.LockUnavailable(p))
		}
	}
	return nil
}

// halt is a halt decision, for steps that return one or none.
func halt(reason capsule.HaltReason, findings ...capsule.Finding) *Decision {
	d := HaltWith(reason, findings...)
	return &d
}

func detailsToFindings(details []string) []capsule.Finding {
	out := make([]capsule.Finding, 0, len(details))
	for _, d := range details {
		field, msg, ok := strings.Cut(d, ": ")
		if !ok {
			field, msg = "", d
		}
		out = append(out, capsule.Finding{Field: field, Message: msg})
	}
	return out
}

// supportsVersion reports whether version's major ("1" of "1.0") is supported.
// An unreadable version is left to the schema, which names it precisely.
func supportsVersion(majors []int, version string) bool {
	m, _, _ := strings.Cut(version, ".")
	n, err := strconv.Atoi(m)
	if err != nil {
		return true
	}
	for _, s := range majors {
		if s == n {
			return true
		}
	}
	return false
}
