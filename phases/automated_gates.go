package phases

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sagad/sagad/capsule"

	"github.com/sagad/sagad/rules"
)

// AutomatedGates is phase 3: every absolute rule of the constitution, all
// evaluated, every violation listed; then a wave capsule's admission to its
// wave (admitToWave) and a child capsule's to its delegation tree
// (admitToFamily).
type AutomatedGates struct{}

// Run evaluates the constitution. A fact that cannot be read is retried, never
// counted as a pass.
func (g AutomatedGates) Run(ctx context.Context, env *Env, in *Input) Decision {
	if d := g.Check(ctx, env, in); d.Action != Advance {
		return d
	}
	if d, held := operatorGate(ctx, env, in); held {
		return d
	}
	return admitToFamily(ctx, env, in, admitToWave(ctx, env, in, AdvanceWith()))
}

// Check is the phase's judgement without its effects: the dependencies
// (a wait is a Park) and the rules, but neither the operator gate nor the
// wave admission, which reserves. It writes nothing, so a replay's
// preview (sagactl replay --dry-run) asks it what the bytes would meet.
func (AutomatedGates) Check(ctx context.Context, env *Env, in *Input) Decision {
	if d, wait := dependencies(ctx, env, in); wait {
		return d
	}
	facts := env.Facts
	if facts != nil && in.Checkpoint != nil {
		facts = ownedID{Facts: facts, key: in.Checkpoint.Key}
	}
	res := rules.Evaluate(ctx, rules.Input{
		Capsule: in.Capsule,
		Raw:     in.Raw,
		Config:  env.Rules,
		Facts:   facts,
		Now:     env.Now(),
	})
	if len(res.Errors) > 0 {
		for n, err := range res.Errors {
			return RetryLater(fmt.Errorf("automated gates: rule %d: %w", n, err))
		}
	}
	if len(res.Violated) > 0 {
		return HaltWith(res.Halt(), res.Findings...)
	}
	return AdvanceWith()
}

// ownedID answers Rule 2's question without a lookup when the capsule runs
// under its own id as key: RECEPTION gave it the key only because no other
// content held the id (other content under a taken id gets an "x-" key).
type ownedID struct {
	rules.Facts
	key string
}

func (f ownedID) IDConflict(ctx context.Context, id, digest string) (bool, error) {
	if id == f.key {
		return false, nil
	}
	return f.Facts.IDConflict(ctx, id, digest)
}

// DependencyStates is what AUTOMATED_GATES needs to wait for dependencies
// (the store's facts provide it); without it Rule 24 alone judges them.
type DependencyStates interface {
	DependencyState(ctx context.Context, id string) (state capsule.State, known bool, err error)
}

// dependencies decides, before anything is spent, what the capsule's
// depends_on mean now: a dependency that halted or was cancelled halts it
// (dependency_failed:<id>); any not completed yet makes it wait (state
// waiting; the sweeper resumes it once they completed, or halts it). Only
// when every one completed do the rules run (Rule 24 then passes).
func dependencies(ctx context.Context, env *Env, in *Input) (Decision, bool) {
	ds, ok := env.Facts.(DependencyStates)
	if !ok || len(in.Capsule.DependsOn) == 0 {
		return Decision{}, false
	}
	self, _ := capsule.CanonicalID(in.Capsule.CapsuleID)
	var pending []string
	for _, dep := range in.Capsule.DependsOn {
		id, ok := capsule.CanonicalID(dep)
		if !ok || id == self {
			continue // Rule 24's findings
		}
		state, known, err := ds.DependencyState(ctx, id)
		if err != nil {
			return RetryLater(fmt.Errorf("automated gates: dependency %s: %w", id, err)), true
		}
		switch {
		case known && (state == capsule.Halted || state == capsule.Cancelled):
			return HaltWith(capsule.DependencyFailed(id), capsule.Finding{
				Rule: 24, Field: "depends_on", Message: fmt.Sprintf("dependency %s ended %s", id, state),
			}), true
		case known && state == capsule.Completed:
		default:
			pending = append(pending, id)
		}
	}
	if len(pending) == 0 {
		return Decision{}, false
	}
	return Decision{
		Action: Park, Trigger: capsule.TriggerDependencies, WaitFor: pending,
		Reason: fmt.Sprintf("waiting for %d of %d dependencies: %s", len(pending), len(in.Capsule.DependsOn), strings.Join(pending, ", ")),
	}, true
}

// operatorGate holds a composition step declared with gate "operator"
// until a person decides: after its dependencies and the rules (so a
// person decides on a step that could run), before its wave admission (so
// a held step reserves nothing). The trigger fires once: accepted (a
// resume), the step goes on.
func operatorGate(ctx context.Context, env *Env, in *Input) (Decision, bool) {
	c := in.Capsule
	if c == nil || c.Chain == nil || c.Chain.Gate != capsule.GateOperator {
		return Decision{}, false
	}
	if in.Checkpoint != nil && in.Checkpoint.State.HasWarned(capsule.TriggerCompositionGate) {
		return Decision{}, false
	}
	step := gateStepName(ctx, env, in)
	return Decision{
		Action: Park, Trigger: capsule.TriggerCompositionGate,
		Reason: fmt.Sprintf("composition %s: step %s waits for a person: sagactl composition decide %s %s accept|reject", c.Chain.ID, step, c.Chain.ID, step),
	}, true
}

// stepNameTimeout bounds the read of a gated step's name: the name only
// words the reason, so a slow read must not hold the gate.
const stepNameTimeout = 2 * time.Second

// gateStepName is the gated step's name as `composition decide` takes it,
// read from the composition's record; when that cannot be read, the
// step's index says which step it is.
func gateStepName(ctx context.Context, env *Env, in *Input) string {
	c := in.Capsule
	fallback := fmt.Sprintf("<step %d's name>", c.Chain.Step)
	if env == nil || env.Steps == nil {
		return fallback
	}
	producer := ""
	if in.Checkpoint != nil {
		producer = in.Checkpoint.Producer
	}
	ctx, cancel := context.WithTimeout(ctx, stepNameTimeout)
	defer cancel()
	name, err := env.Steps.StepName(ctx, c.Chain.ID, producer, max(c.Chain.Run, 1), c.Chain.Step)
	if err != nil || name == "" {
		return fallback
	}
	return name
}
