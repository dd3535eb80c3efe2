package phases

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
)

type namesFunc func(ctx context.Context, id, producer string, run, step int) (string, error)

func (f namesFunc) StepName(ctx context.Context, id, producer string, run, step int) (string, error) {
	return f(ctx, id, producer, run, step)
}

// TestOperatorGateNamesTheStep: the gate's reason names the step as
// `composition decide` takes it, read from the record of the capsule's
// run and producer; without a record to read, the step's index says which.
func TestOperatorGateNamesTheStep(t *testing.T) {
	t.Parallel()
	named := namesFunc(func(_ context.Context, id, producer string, run, step int) (string, error) {
		if id == "c" && producer == "alice" && run == 2 && step == 1 {
			return "review", nil
		}
		return "", errors.New("no such step")
	})
	broken := namesFunc(func(context.Context, string, string, int, int) (string, error) { return "", errors.New("down") })
	for _, tc := range []struct {
		name  string
		steps StepNames
		run   int
		want  string
	}{
		{"named", named, 2, "composition c: step review waits for a person: sagactl composition decide c review accept|reject"},
		{"other run", named, 0, "composition c: step <step 1's name> waits for a person: sagactl composition decide c <step 1's name> accept|reject"},
		{"unreadable", broken, 2, "composition c: step <step 1's name> waits for a person: sagactl composition decide c <step 1's name> accept|reject"},
		{"no names", nil, 2, "composition c: step <step 1's name> waits for a person: sagactl composition decide c <step 1's name> accept|reject"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := &Input{
				Capsule:    &capsule.Capsule{Chain: &capsule.ChainRound{ID: "c", Step: 1, Run: tc.run, Gate: capsule.GateOperator}},
				Checkpoint: &capsule.Checkpoint{Producer: "alice"},
			}
			d, held := operatorGate(context.Background(), &Env{Steps: tc.steps}, in)
			require.True(t, held)
			require.Equal(t, capsule.TriggerCompositionGate, d.Trigger)
			require.Equal(t, tc.want, d.Reason)
		})
	}
}
