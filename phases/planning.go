package phases

import (
	"context"
	"strings"

	"github.com/sagad/sagad/capsule"
)

// Planning is phase 2 (Rule 35): the spec must be approved and its
// definition of ready complete.
type Planning struct{}

// MissingSpecFields names every spec field that is missing or unsatisfied, in
// schema order; empty means the capsule is ready.
func MissingSpecFields(s capsule.Spec) []string {
	var missing []string
	if !s.Approved {
		missing = append(missing, "approved")
	}
	if strings.TrimSpace(s.ApprovedBy) == "" {
		missing = append(missing, "approved_by")
	}
	if s.ApprovedAt == nil || s.ApprovedAt.IsZero() {
		missing = append(missing, "approved_at")
	}
	if len(s.AcceptanceCriteria) == 0 {
		missing = append(missing, "acceptance_criteria")
	}
	if strings.TrimSpace(s.ProblemStatement) == "" {
		missing = append(missing, "problem_statement")
	}
	if strings.TrimSpace(s.DefinitionOfDone) == "" {
		missing = append(missing, "definition_of_done")
	}
	return missing
}

// Run halts with spec_not_approved:[fields] naming every missing field.
func (Planning) Run(_ context.Context, _ *Env, in *Input) Decision {
	missing := MissingSpecFields(in.Capsule.Spec)
	if len(missing) == 0 {
		return AdvanceWith()
	}
	findings := make([]capsule.Finding, len(missing))
	for i, f := range missing {
		findings[i] = capsule.Finding{Rule: 35, Title: "Spec approved before work", Field: "spec." + f, Message: "spec." + f + " is missing or unsatisfied"}
	}
	return HaltWith(capsule.SpecNotApproved(missing), findings...)
}
