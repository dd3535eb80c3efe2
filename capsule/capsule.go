package capsule

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Capsule is one unit of agent work as published on the intake subject. Field
// names are the wire contract (PIPELINE §2); capsule.schema.json is the
// authority on which are required.
type Capsule struct {
	SchemaVersion   string          `json:"schema_version"`
	CapsuleID       string          `json:"capsule_id"`
	WaveID          string          `json:"wave_id,omitempty"`
	TraceID         string          `json:"trace_id,omitempty"`
	CreatedAt       time.Time       `json:"created_at"`
	Deadline        time.Time       `json:"deadline"`
	ProducerAgentID string          `json:"producer_agent_id"`
	Task            Task            `json:"task"`
	Spec            Spec            `json:"spec"`
	ContextRefs     []string        `json:"context_refs"`
	Target          string          `json:"target"`
	Constraints     Constraints     `json:"constraints"`
	Budget          Budget          `json:"budget"`
	Review          ReviewPolicy    `json:"review"`
	DependsOn       []string        `json:"depends_on,omitempty"`
	Chain           *ChainRound     `json:"chain,omitempty"`
	Metadata        json.RawMessage `json:"metadata,omitempty"`
	Integrity       Integrity       `json:"integrity"`
	// ParentCapsuleID names the capsule whose executor call published this
	// one (a delegation): RECEPTION takes the link only with that call's
	// call_token (the Saga-Parent-Token header), records the depth and
	// charges this capsule's spend to the parent's budget as well.
	ParentCapsuleID string `json:"parent_capsule_id,omitempty"`
}

// ChainStep places a capsule in a chain (sagactl publish --chain): the
// chain's id and the step's index, from 0. Informational: the order is
// enforced by depends_on, the data flow by an artifact:<id>/final context ref.
type ChainStep struct {
	ID   string `json:"id"`
	Step int    `json:"step"`
	// Run is the composition's run, from 2; 0 is run 1.
	Run int `json:"run,omitempty"`
	// Gate is the step's gate ([GateOperator]): the step waits for a
	// person's decision before it starts.
	Gate string `json:"gate,omitempty"`
}

// ChainRound is a capsule's chain object: its membership ([ChainStep],
// all a checkpoint keeps of it) and, in a verification loop's later
// round, the round and the verifier's findings, which stay in the
// capsule's bytes.
type ChainRound struct {
	ID   string `json:"id"`
	Step int    `json:"step"`
	// Run is the composition's run, from 2; 0 is run 1.
	Run int `json:"run,omitempty"`
	// Gate is the step's gate ([GateOperator]).
	Gate string `json:"gate,omitempty"`
	// Round is the verification loop's round the step runs in, from 2
	// (0 is round 1): sagad publishes a loop's steps again, under fresh
	// ids, when its verifier did not pass.
	Round int `json:"round,omitempty"`
	// Findings are the loop's verifier's findings on the round before
	// (at most [MaxChainFindings]): cycle 1's request carries them first,
	// with source "verifier" ([FindingSourceVerifier]).
	Findings []Finding `json:"findings,omitempty"`
	// PriorArtifact is the last artifact the same step made in the round
	// before (round 2 on, when it made one): cycle 1 of a round revises it,
	// so EXECUTION's request carries it as prior_artifact.
	PriorArtifact string `json:"prior_artifact,omitempty"`
}

// MaxChainFindings bounds the verifier findings a round's step carries.
const MaxChainFindings = 16

// Member is the step's membership alone (id, step, run, gate).
func (s *ChainRound) Member() *ChainStep {
	if s == nil {
		return nil
	}
	return &ChainStep{ID: s.ID, Step: s.Step, Run: s.Run, Gate: s.Gate}
}

// GateOperator is the gate of a composition step held for a person.
const GateOperator = "operator"

// Task says what to do; Kind selects the executor.
type Task struct {
	Kind        string `json:"kind"`
	Title       string `json:"title"`
	Description string `json:"description"`
	// Model asks for a model tier ("low-tier", …) or model id of sagad's
	// "models" config; RECEPTION halts model_not_allowed for one it does
	// not list. Optional: the executor's own model otherwise.
	Model string `json:"model,omitempty"`
}

// Spec is the approved specification and its definition-of-ready fields
// (Rule 35). The schema leaves them optional so PLANNING can name every
// missing one instead of RECEPTION rejecting the capsule wholesale.
type Spec struct {
	Approved           bool       `json:"approved"`
	ApprovedBy         string     `json:"approved_by,omitempty"`
	ApprovedAt         *time.Time `json:"approved_at,omitempty"`
	AcceptanceCriteria []string   `json:"acceptance_criteria,omitempty"`
	ProblemStatement   string     `json:"problem_statement,omitempty"`
	DefinitionOfDone   string     `json:"definition_of_done,omitempty"`
}

// Constraints bound where the work may act.
type Constraints struct {
	ResourceLocksRequired []string `json:"resource_locks_required,omitempty"`
	AllowedPaths          []string `json:"allowed_paths,omitempty"`
	ForbiddenPaths        []string `json:"forbidden_paths,omitempty"`
	Network               Network  `json:"network"`
	Destructive           bool     `json:"destructive"`
}

// Network declares the network access the work needs (Rule 25). Mode is
// "none" or "restricted"; anything but "none" needs a justification and hosts.
type Network struct {
	Mode          string   `json:"mode"`
	Justification string   `json:"justification,omitempty"`
	AllowHosts    []string `json:"allow_hosts,omitempty"`
}

// Budget caps what the capsule may consume (Rule 16).
type Budget struct {
	Tokens  int64   `json:"tokens"`
	Dollars float64 `json:"dollars"`
	// Child is the limit a parent sets each of its children
	// (docs/DELEGATION.md "Child limits"); it binds the children, never
	// the capsule that declares it.
	Child *ChildBudget `json:"child,omitempty"`
}

// ChildBudget is budget.child: what each child of the capsule (a capsule
// whose parent_capsule_id names it) may use of attempts and wall time.
// Both are optional.
type ChildBudget struct {
	// MaxAttempts bounds the child's EXECUTION agent calls over its run,
	// retries and review cycles included: 1 to [MaxChildAttempts].
	MaxAttempts int `json:"max_attempts,omitempty"`
	// MaxWallTime bounds the child's run from its reception: a Go
	// duration ("30m", "2h"), positive and at most [MaxChildWallTime].
	MaxWallTime string `json:"max_wall_time,omitempty"`
}

// Bounds of budget.child.
const (
	MaxChildAttempts = 10
	MaxChildWallTime = 7 * 24 * time.Hour
)

// WallTime is max_wall_time as a duration (0 when absent or unreadable).
func (b *ChildBudget) WallTime() time.Duration {
	if b == nil || b.MaxWallTime == "" {
		return 0
	}
	d, err := time.ParseDuration(b.MaxWallTime)
	if err != nil {
		return 0
	}
	return d
}

// Invalid names the first member of budget.child out of its bounds (its
// JSON pointer) and why, or returns "" when both are in bounds: the rules
// the schema leaves to RECEPTION, which halts schema_invalid on them.
func (b *ChildBudget) Invalid() (pointer, why string) {
	if b == nil {
		return "", ""
	}
	if b.MaxAttempts != 0 && (b.MaxAttempts < 1 || b.MaxAttempts > MaxChildAttempts) {
		return "/budget/child/max_attempts", fmt.Sprintf("budget.child.max_attempts is %d, want 1 to %d", b.MaxAttempts, MaxChildAttempts)
	}
	if b.MaxWallTime != "" {
		d, err := time.ParseDuration(b.MaxWallTime)
		switch {
		case err != nil:
			return "/budget/child/max_wall_time", "budget.child.max_wall_time " + strconv.Quote(b.MaxWallTime) + " is no duration (e.g. \"30m\")"
		case d <= 0 || d > MaxChildWallTime:
			return "/budget/child/max_wall_time", "budget.child.max_wall_time is " + d.String() + ", want more than 0 and at most 168h"
		}
	}
	return "", ""
}

// ReviewPolicy names the independent reviewer and the review policy.
type ReviewPolicy struct {
	ReviewerAgentID string `json:"reviewer_agent_id"`
	MaxCycles       int    `json:"max_cycles,omitempty"`
	OperatorGate    Gate   `json:"operator_gate,omitempty"`
}

// Gate is review.operator_gate: false (no gate), true (an approval waits for
// the operator before HANDOFF), or "all" (every verdict waits for the
// operator, with no automatic revision or halt).
type Gate int

// Operator gates.
const (
	GateOff Gate = iota
	GateApproved
	GateAll
)

// On reports whether some verdict waits for the operator.
func (g Gate) On() bool { return g != GateOff }

// All reports whether every verdict waits for the operator.
func (g Gate) All() bool { return g == GateAll }

// UnmarshalJSON accepts true, false and "all".
func (g *Gate) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "true":
		*g = GateApproved
	case "false", "null":
		*g = GateOff
	case `"all"`:
		*g = GateAll
	default:
		return fmt.Errorf("review.operator_gate: %s: want true, false or \"all\"", b)
	}
	return nil
}

// MarshalJSON writes the gate as it is written in a capsule.
func (g Gate) MarshalJSON() ([]byte, error) {
	switch g {
	case GateApproved:
		return []byte("true"), nil
	case GateAll:
		return []byte(`"all"`), nil
	}
	return []byte("false"), nil
}

// Integrity carries the capsule's digest; see [Digest].
type Integrity struct {
	SHA256 string `json:"sha256"`
}

// MaxCycles is the hard ceiling of Rule 12.
const MaxCycles = 3

// CycleLimit is the number of EXECUTION runs this capsule may use: its
// review.max_cycles when that lowers the ceiling, [MaxCycles] otherwise.
func (c *Capsule) CycleLimit() int {
	if c.Review.MaxCycles >= 1 && c.Review.MaxCycles < MaxCycles {
		return c.Review.MaxCycles
	}
	return MaxCycles
}

// Usage is what one executor or reviewer call consumed, or a running total.
type Usage struct {
	Tokens  int64   `json:"tokens"`
	Dollars float64 `json:"dollars"`
	// Estimated says Tokens is, at least in part, sagad's estimate
	// (ceil(bytes/4) of an agent call that reported no usage), not a
	// count the agent reported.
	Estimated bool `json:"estimated,omitempty"`
}

// ErrInvalidUsage is wrapped by the error [Usage.Validate] returns.
var ErrInvalidUsage = errors.New("invalid usage")

// Validate returns an error wrapping [ErrInvalidUsage], whose text starts
// "invalid usage: ", when u has negative tokens or dollars that are
// negative, NaN or infinite. Usage reported by an executor, a reviewer or a
// completion must pass it before it is charged or recorded: a negative
// amount would give budget back, and NaN compares false against every cap.
func (u Usage) Validate() error {
	var why string
	switch {
	case u.Tokens < 0:
		why = "tokens must not be negative"
	case math.IsNaN(u.Dollars) || math.IsInf(u.Dollars, 0):
		why = "dollars must be a finite number"
	case u.Dollars < 0:
		why = "dollars must not be negative"
	default:
		return nil
	}
	return fmt.Errorf("%w: %d tokens / %v dollars: %s", ErrInvalidUsage, u.Tokens, u.Dollars, why)
}

// Valid reports whether [Usage.Validate] accepts u.
func (u Usage) Valid() bool { return u.Validate() == nil }

// Add returns the sum of u and o.
func (u Usage) Add(o Usage) Usage {
	return Usage{Tokens: u.Tokens + o.Tokens, Dollars: u.Dollars + o.Dollars, Estimated: u.Estimated || o.Estimated}
}

// Finding is one observation of a rule or review: which rule, which field and
// a message that names the offending value.
type Finding struct {
	Rule    int    `json:"rule,omitempty"`
	Title   string `json:"title,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
	// Source says who raised the finding when it was not the reviewer:
	// "operator" for an operator's revise rationale (FindingSourceOperator).
	Source string `json:"source,omitempty"`
	// Severity is what the reviewer said of the finding's weight
	// ("blocker", "major", "minor", ...), as it said it; empty when it said
	// nothing. Agent and model reviewers report it.
	Severity string `json:"severity,omitempty"`
}

// FindingSourceVerifier marks a finding of a verification loop's verifier
// on the round before, which a round's step addresses (chain.findings).
const FindingSourceVerifier = "verifier"

// FindingSourceOperator marks a finding an operator gave (a revise's
// rationale), as opposed to the reviewer's.
const FindingSourceOperator = "operator"
