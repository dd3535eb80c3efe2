package rules_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/rules"
)

// Evaluating offline (no Facts), as `sagactl check` does: the violations are
// decided, and the live parts of rules 2 and 24 are reported as not evaluated.
func ExampleEvaluate() {
	created := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	c := &capsule.Capsule{
		SchemaVersion:   "1.0",
		CapsuleID:       "01HZY8J6Q4W3V0D7T1N9K2M5PC",
		CreatedAt:       created,
		Deadline:        created.Add(24 * time.Hour),
		ProducerAgentID: "agent.writer",
		Task:            capsule.Task{Kind: "stub", Title: "Add a greeting"},
		Spec:            capsule.Spec{Approved: true, ApprovedBy: "human:alice", AcceptanceCriteria: []string{"greets"}},
		ContextRefs:     []string{"file:../../etc/passwd"},
		Target:          "file:src/greet.go",
		Constraints: capsule.Constraints{
			ResourceLocksRequired: []string{"src"},
			AllowedPaths:          []string{"docs"},
			Network:               capsule.Network{Mode: "none"},
		},
		Budget:    capsule.Budget{Tokens: 1000, Dollars: 1},
		Review:    capsule.ReviewPolicy{ReviewerAgentID: "stub-reviewer"},
		DependsOn: []string{"0f8fad5b-d9cb-469f-a165-70867728950e"},
	}
	res := rules.Evaluate(context.Background(), rules.Input{Capsule: c})
	fmt.Println(res.Halt())
	for _, f := range res.Findings {
		fmt.Printf("rule %d %s: %s\n", f.Rule, f.Field, f.Message)
	}
	fmt.Println("not evaluated:", res.NotEvaluated)
	// Output:
	// absolute_rules_violated:[5, 7]
	// rule 5 constraints.resource_locks_required[0]: lock path "src" lies outside constraints.allowed_paths
	// rule 5 target: target path "src/greet.go" lies outside constraints.allowed_paths
	// rule 7 context_refs[0]: context ref is unsafe: path "../../etc/passwd": '..' traversal
	// not evaluated: [2 24]
}

func ExampleWithin() {
	fmt.Println(rules.Within("src", "src/a.go"))
	fmt.Println(rules.Within("src", "srcx/a.go"))
	fmt.Println(rules.Within(".", "docs/../../x"))
	// Output:
	// true
	// false
	// false
}

func ExampleCheckPath() {
	for _, p := range []string{"src/a.go", "src/../x", "/etc", "a\x00"} {
		fmt.Println(rules.CheckPath(p))
	}
	// Output:
	// <nil>
	// path "src/../x": '..' traversal
	// path "/etc": absolute path
	// path "a\x00": control character
}

// Listing the constitution in force, as `sagactl rules` does.
func ExampleLookup() {
	r, _ := rules.Lookup(14)
	fmt.Println(r.Number, r.Title, r.Kind, r.Params(rules.Config{}))
	// Output:
	// 14 Bounded horizon absolute map[horizon:168h0m0s]
}
