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
// dollars) and lock availability, in that order; the first failure halts. holder is the checkpoint key the capsule will use.
func Receive(ctx context.Context, env *Env, raw []byte, holder func(id string) string) Received {
	var r Received
	limit := env.MaxIntakeBytes
	if limit <= 0 {
		limit = DefaultMaxIntakeBytes
	}
	if len(raw) > limit {
		r.Decision = HaltWith(capsule.CapsuleTooLarge(len(raw)))
		return r
	}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		r.Decision = HaltWith(capsule.NotJSON())
		return r
	}
	// One strict parse serves the digest, the head and the schema. Bytes it
	// refuses (duplicate keys, unpaired surrogates) take the lenient path:
	// they get no digest, so at worst they halt integrity_mismatch.
	var version string
	doc, perr := capsule.ParseJSON(raw)
	obj, _ := doc.(map[string]any)
	if perr == nil && obj != nil {
		r.ClaimedID, _ = obj["capsule_id"].(string)
		version, _ = obj["schema_version"].(string)
		if d, err := capsule.DigestObject(obj); err == nil {
			r.Digest = d
		}
	} else {
		var head struct {
			SchemaVersion json.RawMessage `json:"schema_version"`
			CapsuleID     json.RawMessage `json:"capsule_id"`
		}
		if !json.Valid(trimmed) || json.Unmarshal(trimmed, &head) != nil {
			r.Decision = HaltWith(capsule.NotJSON())
			return r
		}
		_ = json.Unmarshal(head.CapsuleID, &r.ClaimedID)
		_ = json.Unmarshal(head.SchemaVersion, &version)
		obj = nil
	}
	if version != "" && !supportsVersion(env.Rules.WithDefaults().SupportedMajors, version) {
		r.Decision = HaltWith(capsule.UnsupportedSchemaVersion(version))
		return r
	}
	var verr error
	if obj != nil {
		verr = schemas.ValidateDoc(schemas.Capsule, obj)
	} else {
		verr = schemas.Validate(schemas.Capsule, raw)
	}
	if err := verr; err != nil {
		var verr *schemas.ValidationError
		if errors.As(err, &verr) {
			// Every bad entry of a long list is a detail: capped, so the
			// checkpoint stays one NATS message.
			r.Decision = HaltWith(capsule.SchemaInvalid(verr.Pointers),
				capsule.CapFindings(detailsToFindings(verr.Details), capsule.MaxFindings)...)
			return r
		}
		if errors.Is(err, schemas.ErrNotJSON) {
			r.Decision = HaltWith(capsule.NotJSON())
			return r
		}
		r.Decision = RetryAfter(env.RetryDelay, fmt.Errorf("reception: validate: %w", err))
		return r
	}
	c := new(capsule.Capsule)
	if err := json.Unmarshal(raw, c); err != nil {
		// The schema accepted it, so this is a schema/type mismatch of ours:
		// still the user's bytes are kept and the reason is specific.
		r.Decision = HaltWith(capsule.SchemaInvalid([]string{"/"}), capsule.Finding{Message: err.Error()})
		return r
	}
	c.Canonicalize() // one id whatever its case: the key below and every later phase
	r.Capsule = c
	if l, over := c.ExceededLimit(); over {
		r.Decision = HaltWith(capsule.CapsuleLimitsExceeded(l.Field), capsule.Finding{
			Field: l.Field, Message: fmt.Sprintf("%s has %d entries, over the limit of %d", l.Field, l.Len, l.Max),
		})
		return r
	}
	if r.Digest == "" || c.Integrity.SHA256 != r.Digest {
		r.Decision = HaltWith(capsule.IntegrityMismatch(), capsule.Finding{
			Field: "integrity.sha256", Message: fmt.Sprintf("declared %q, computed %q", c.Integrity.SHA256, r.Digest),
		})
		return r
	}
	if !c.Deadline.After(env.Now()) {
		r.Decision = HaltWith(capsule.DeadlineInPast(), capsule.Finding{
			Field: "deadline", Message: "deadline " + c.Deadline.UTC().Format("2006-01-02T15:04:05Z07:00") + " has passed",
		})
		return r
	}
	if c.Budget.Tokens <= 0 {
		r.Decision = HaltWith(capsule.BudgetTokensNonPositive(), capsule.Finding{
			Field: "budget.tokens", Message: "budget.tokens is " + strconv.FormatInt(c.Budget.Tokens, 10),
		})
		return r
	}
	// budget.dollars is a JSON number, so never NaN or infinite here; the
	// negated test keeps even those out.
	if !(c.Budget.Dollars > 0) {
		r.Decision = HaltWith(capsule.BudgetDollarsNonPositive(), capsule.Finding{
			Field: "budget.dollars", Message: "budget.dollars is " + strconv.FormatFloat(c.Budget.Dollars, 'g', -1, 64),
		})
		return r
	}
	for _, p := range c.Constraints.ResourceLocksRequired {
		ok, err := env.Locks.Available(ctx, p, holder(c.CapsuleID))
		if err != nil {
			r.Decision = RetryAfter(env.RetryDelay, fmt.Errorf("reception: lock %q: %w", p, err))
			return r
		}
		if !ok {
			r.Decision = HaltWith(capsule.LockUnavailable(p))
			return r
		}
	}
	r.Decision = AdvanceWith()
	return r
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
