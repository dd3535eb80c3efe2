package rules

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/sagad/sagad/capsule"
)

// finding builds a finding for field; Rule and Title are stamped by Rule.run.
func finding(field, format string, args ...any) capsule.Finding {
	return capsule.Finding{Field: field, Message: fmt.Sprintf(format, args...)}
}

// index renders "name[i]".
func index(name string, i int) string { return name + "[" + strconv.Itoa(i) + "]" }

// Rule 1: the schema_version major is supported.
func checkSchemaVersion(_ context.Context, in Input) ([]capsule.Finding, error) {
	v := in.Capsule.SchemaVersion
	majorText, _, _ := strings.Cut(v, ".")
	major, err := strconv.Atoi(majorText)
	if err != nil || majorText != strconv.Itoa(major) {
		return []capsule.Finding{finding("schema_version", "schema version %q has no valid numeric major", v)}, nil
	}
	if !slices.Contains(in.Config.SupportedMajors, major) {
		return []capsule.Finding{finding("schema_version",
			"schema version %q: major %d is not supported (supported: %v)", v, major, in.Config.SupportedMajors)}, nil
	}
	return nil, nil
}

// ValidCapsuleID reports whether id is a UUID (8-4-4-4-12 hex digits, any
// case) or a ULID (26 Crockford base32 characters, any case), the forms
// Rule 2 accepts; capsule.CanonicalID gives the form sagad compares.
func ValidCapsuleID(id string) bool {
	_, ok := capsule.CanonicalID(id)
	return ok
}

// Rule 2: capsule_id is a UUID or ULID and not already used by a different
// or completed capsule.
func checkIdentity(ctx context.Context, in Input) ([]capsule.Finding, error) {
	c := in.Capsule
	if !ValidCapsuleID(c.CapsuleID) {
		return []capsule.Finding{finding("capsule_id", "capsule id %q is neither a UUID nor a ULID", c.CapsuleID)}, nil
	}
	if in.Facts == nil {
		return nil, ErrNoFacts
	}
	id, _ := capsule.CanonicalID(c.CapsuleID) // the checkpoint key
	conflict, err := in.Facts.IDConflict(ctx, id, c.Integrity.SHA256)
	if err != nil {
		return nil, fmt.Errorf("look up capsule id %q: %w", c.CapsuleID, err)
	}
	if conflict {
		return []capsule.Finding{finding("capsule_id",
			"capsule id %q is already used by a completed capsule or by one with different content", c.CapsuleID)}, nil
	}
	return nil, nil
}

// Rule 3: the producer id is well formed and, with a registry, registered.
func checkProducer(_ context.Context, in Input) ([]capsule.Finding, error) {
	id := in.Capsule.ProducerAgentID
	if !ValidAgentID(id) {
		return []capsule.Finding{finding("producer_agent_id", "producer agent id %q is malformed", id)}, nil
	}
	if len(in.Config.AgentRegistry) > 0 && !slices.Contains(in.Config.AgentRegistry, id) {
		return []capsule.Finding{finding("producer_agent_id", "producer agent id %q is not in the agent registry", id)}, nil
	}
	return nil, nil
}

// Rule 4: the spec was not approved by its own producer. A missing approver
// is PLANNING's business (Rule 35), not this rule's.
func checkSpecApproval(_ context.Context, in Input) ([]capsule.Finding, error) {
	c := in.Capsule
	by := strings.TrimSpace(c.Spec.ApprovedBy)
	if by != "" && by == strings.TrimSpace(c.ProducerAgentID) {
		return []capsule.Finding{finding("spec.approved_by", "spec approved by %q, the producer itself", c.Spec.ApprovedBy)}, nil
	}
	return nil, nil
}

// Rule 10: size and count limits.
func checkSizes(_ context.Context, in Input) ([]capsule.Finding, error) {
	c, cfg := in.Capsule, in.Config
	var fs []capsule.Finding
	size := len(in.Raw)
	if in.Raw == nil {
		b, err := json.Marshal(c)
		if err != nil {
			return nil, fmt.Errorf("encode capsule to measure it: %w", err)
		}
		size = len(b)
	}
	if size > cfg.MaxCapsuleBytes {
		fs = append(fs, finding("", "capsule is %d bytes, over the limit of %d", size, cfg.MaxCapsuleBytes))
	}
	counts := []struct {
		field  string
		n, max int
	}{
		{"context_refs", len(c.ContextRefs), cfg.MaxContextRefs},
		{"spec.acceptance_criteria", len(c.Spec.AcceptanceCriteria), cfg.MaxAcceptanceCriteria},
		{"constraints.resource_locks_required", len(c.Constraints.ResourceLocksRequired), cfg.MaxLocks},
	}
	for _, k := range counts {
		if k.n > k.max {
			fs = append(fs, finding(k.field, "%s has %d entries, over the limit of %d", k.field, k.n, k.max))
		}
	}
	return fs, nil
}

// Rule 11: destructive work needs the operator gate.
func checkDestructive(_ context.Context, in Input) ([]capsule.Finding, error) {
	c := in.Capsule
	if c.Review.OperatorGate.On() {
		return nil, nil
	}
	switch {
	case c.Constraints.Destructive:
		return []capsule.Finding{finding("review.operator_gate",
			"constraints.destructive is true but review.operator_gate is not set")}, nil
	case slices.Contains(in.Config.DestructiveKinds, c.Task.Kind):
		return []capsule.Finding{finding("review.operator_gate",
			"task.kind %q is destructive but review.operator_gate is not set", c.Task.Kind)}, nil
	}
	return nil, nil
}

// Rule 13: acceptance criteria are present, non-blank and distinct (after
// trimming, ignoring case).
func checkAcceptance(_ context.Context, in Input) ([]capsule.Finding, error) {
	ac := in.Capsule.Spec.AcceptanceCriteria
	if len(ac) == 0 {
		return []capsule.Finding{finding("spec.acceptance_criteria", "no acceptance criteria")}, nil
	}
	if len(ac) == 1 && strings.TrimSpace(ac[0]) != "" {
		return nil, nil // nothing to duplicate: no key to lower
	}
	var fs []capsule.Finding
	seen := make(map[string]int, len(ac))
	for i, a := range ac {
		key := strings.ToLower(strings.TrimSpace(a))
		if key == "" {
			fs = append(fs, finding(index("spec.acceptance_criteria", i), "acceptance criterion %q is blank", a))
			continue
		}
		if j, dup := seen[key]; dup {
			fs = append(fs, finding(index("spec.acceptance_criteria", i),
				"acceptance criterion %q duplicates spec.acceptance_criteria[%d]", a, j))
			continue
		}
		seen[key] = i
	}
	return fs, nil
}

// Rule 14: the deadline is after created_at and within the horizon.
func checkHorizon(_ context.Context, in Input) ([]capsule.Finding, error) {
	c := in.Capsule
	span := c.Deadline.Sub(c.CreatedAt)
	switch {
	case c.Deadline.Before(c.CreatedAt):
		return []capsule.Finding{finding("deadline", "deadline %s is before created_at %s",
			c.Deadline.Format(timeFormat), c.CreatedAt.Format(timeFormat))}, nil
	case span > in.Config.Horizon:
		return []capsule.Finding{finding("deadline", "deadline %s is %s after created_at, beyond the horizon of %s",
			c.Deadline.Format(timeFormat), span, in.Config.Horizon)}, nil
	}
	return nil, nil
}

const timeFormat = "2006-01-02T15:04:05Z07:00"

// Rule 18: the capsule's own budget is under the per-capsule ceiling.
func checkBudgetCeiling(_ context.Context, in Input) ([]capsule.Finding, error) {
	b, cfg := in.Capsule.Budget, in.Config
	var fs []capsule.Finding
	if b.Tokens > cfg.MaxTokens {
		fs = append(fs, finding("budget.tokens", "budget of %d tokens exceeds the ceiling of %d", b.Tokens, cfg.MaxTokens))
	}
	if math.IsNaN(b.Dollars) || b.Dollars > cfg.MaxDollars {
		fs = append(fs, finding("budget.dollars", "budget of %v dollars exceeds the ceiling of %v", b.Dollars, cfg.MaxDollars))
	}
	return fs, nil
}

// Rule 19: the capsule's wave is open. Whether it has room for the
// capsule's caps is no violation: AUTOMATED_GATES reserves them after the
// rules passed, and a capsule that does not fit waits for room
// (phases.admitToWave, package budget).
func checkWave(ctx context.Context, in Input) ([]capsule.Finding, error) {
	c := in.Capsule
	if c.WaveID == "" {
		return nil, nil
	}
	if in.Facts == nil {
		return nil, ErrNoFacts
	}
	w, ok, err := in.Facts.Wave(ctx, c.WaveID)
	if err != nil {
		return nil, fmt.Errorf("look up wave %q: %w", c.WaveID, err)
	}
	if ok && w.Closed {
		return []capsule.Finding{finding("wave_id", "wave %q is closed", c.WaveID)}, nil
	}
	return nil, nil
}

// Rule 20: a reviewer is named (or a default one configured) and is not the
// producer.
func checkReviewer(_ context.Context, in Input) ([]capsule.Finding, error) {
	c := in.Capsule
	id, byDefault := in.Config.Reviewer(c)
	r := strings.TrimSpace(id)
	switch {
	case r == "":
		return []capsule.Finding{finding("review.reviewer_agent_id", "no reviewer declared and no default reviewer configured")}, nil
	case r == strings.TrimSpace(c.ProducerAgentID) && byDefault:
		return []capsule.Finding{finding("review.reviewer_agent_id",
			"the default reviewer %q is the producer: declare another reviewer", id)}, nil
	case r == strings.TrimSpace(c.ProducerAgentID):
		return []capsule.Finding{finding("review.reviewer_agent_id",
			"reviewer %q is the producer", id)}, nil
	}
	return nil, nil
}

// Rule 21: review.max_cycles, when present, is within 1..3. The decoded
// capsule cannot tell an explicit 0 from an absent member (both are Go's 0,
// which means the default, see capsule.CycleLimit), so a 0 is looked up in
// the raw bytes: "max_cycles": 0 is below 1 and refused. Without raw bytes
// (a capsule built in Go) 0 means absent.
func checkCycleLimit(_ context.Context, in Input) ([]capsule.Finding, error) {
	n := in.Capsule.Review.MaxCycles
	if n == 0 {
		if !explicitMaxCycles(in.Raw) {
			return nil, nil
		}
	} else if n >= 1 && n <= capsule.MaxCycles {
		return nil, nil
	}
	return []capsule.Finding{finding("review.max_cycles",
		"review.max_cycles %d is outside 1..%d", n, capsule.MaxCycles)}, nil
}

// explicitMaxCycles reports whether raw holds a review.max_cycles member
// (whatever its value). It decodes with encoding/json, the decoder that made
// the capsule, so both agree on duplicate members and on escapes. Bytes
// with neither "max_cycles" nor an escape cannot name the member (a member
// name can only be spelt differently with \u escapes) and are not decoded.
func explicitMaxCycles(raw []byte) bool {
	if !bytes.Contains(raw, []byte("max_cycles")) && !bytes.Contains(raw, []byte(`\u`)) {
		return false
	}
	var probe struct {
		Review struct {
			MaxCycles *json.RawMessage `json:"max_cycles"`
		} `json:"review"`
	}
	if json.Unmarshal(raw, &probe) != nil {
		return false
	}
	return probe.Review.MaxCycles != nil && string(*probe.Review.MaxCycles) != "null"
}

// Rule 22: an executor is configured for task.kind and a reviewer for
// review.reviewer_agent_id, so that a capsule nobody can review is refused
// before EXECUTION spends its budget. A blank reviewer id is Rule 20's.
// Both are compared exactly, the way the executors registry looks them up.
func checkExecutor(_ context.Context, in Input) ([]capsule.Finding, error) {
	var fs []capsule.Finding
	if k := in.Capsule.Task.Kind; !slices.Contains(in.Config.ExecutorKinds, k) {
		fs = append(fs, finding("task.kind", "no executor is configured for task.kind %q", k))
	}
	r, byDefault := in.Config.Reviewer(in.Capsule)
	switch {
	case strings.TrimSpace(r) == "" || slices.Contains(in.Config.ReviewerIDs, r):
	case byDefault:
		// Validate refuses such a config; a Config built in Go may not.
		fs = append(fs, finding("review.reviewer_agent_id", "no reviewer is configured for the default reviewer %q", r))
	default:
		fs = append(fs, finding("review.reviewer_agent_id", "no reviewer is configured for review.reviewer_agent_id %q", r))
	}
	return fs, nil
}

// Rule 24: every dependency completed HANDOFF. A malformed id or the capsule
// itself (in any case) can never complete, so those are findings even
// offline. Dependencies are looked up by canonical id, the checkpoint key.
func checkDependencies(ctx context.Context, in Input) ([]capsule.Finding, error) {
	c := in.Capsule
	var (
		fs   []capsule.Finding
		live []int // indices that need a fact lookup
	)
	// Ids compare in canonical form: a decoded capsule has them so already,
	// one built in Go may not.
	self, _ := capsule.CanonicalID(c.CapsuleID)
	for i, id := range c.DependsOn {
		field := index("depends_on", i)
		cid, ok := capsule.CanonicalID(id)
		switch {
		case !ok:
			fs = append(fs, finding(field, "dependency %q is not a capsule id", id))
		case cid == self:
			fs = append(fs, finding(field, "capsule depends on itself (%q)", id))
		default:
			live = append(live, i)
		}
	}
	if len(live) == 0 {
		return fs, nil
	}
	if in.Facts == nil {
		return fs, ErrNoFacts
	}
	var errs []error
	done := make(map[string]bool, len(live))
	for _, i := range live {
		id, _ := capsule.CanonicalID(c.DependsOn[i])
		ok, known := done[id]
		if !known {
			var err error
			ok, err = in.Facts.DependencyDone(ctx, id)
			if err != nil {
				errs = append(errs, fmt.Errorf("look up dependency %q: %w", id, err))
				continue
			}
			done[id] = ok
		}
		if !ok {
			fs = append(fs, finding(index("depends_on", i), "dependency %q has not completed HANDOFF", id))
		}
	}
	return fs, errors.Join(errs...)
}

// Rule 25: network access other than "none" is justified and host-limited,
// within the configured allowed hosts when there are any.
func checkNetwork(_ context.Context, in Input) ([]capsule.Finding, error) {
	n := in.Capsule.Constraints.Network
	switch n.Mode {
	case "none":
		return nil, nil
	case "":
		return []capsule.Finding{finding("constraints.network.mode", "network mode is not declared")}, nil
	}
	var fs []capsule.Finding
	if strings.TrimSpace(n.Justification) == "" {
		fs = append(fs, finding("constraints.network.justification",
			"network mode %q needs a justification", n.Mode))
	}
	if len(n.AllowHosts) == 0 {
		fs = append(fs, finding("constraints.network.allow_hosts",
			"network mode %q needs an allow-list of hosts", n.Mode))
	}
	for i, h := range n.AllowHosts {
		switch {
		case strings.TrimSpace(h) == "":
			fs = append(fs, finding(index("constraints.network.allow_hosts", i), "allowed host %q is blank", h))
		case len(in.Config.AllowedHosts) > 0 && !hostAllowed(h, in.Config.AllowedHosts):
			fs = append(fs, finding(index("constraints.network.allow_hosts", i),
				"host %q is not among the configured allowed hosts", h))
		}
	}
	return fs, nil
}
