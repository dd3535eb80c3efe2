package pipeline

import (
	"context"
	"fmt"

	"github.com/sagad/sagad/compose"
	"github.com/sagad/sagad/store"
)

// stepNames names a composition's steps from their records
// (phases.StepNames), for the operator gate's reason.
type stepNames struct{ st *store.Store }

func (s stepNames) StepName(ctx context.Context, id, producer string, run, step int) (string, error) {
	rec, err := compose.GetRun(ctx, s.st, id, producer, run)
	if err != nil {
		return "", err
	}
	if step < 0 || step >= len(rec.Steps) {
		return "", fmt.Errorf("composition %s run %d has no step %d", id, run, step)
	}
	if step < len(rec.Names) {
		return rec.Names[step], nil
	}
	return compose.ChainStepName(step), nil
}
