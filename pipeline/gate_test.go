package pipeline_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
)

// TestOperatorGateAll: with review.operator_gate "all" every verdict waits
// for the operator — a CHANGES_REQUESTED is not revised and a REJECTED not
// halted by themselves. pending shows the verdict and its findings; accept
// overrides a rejection (on to HANDOFF), and reject halts with
// operator_rejected, emitting the outcome once.
func TestOperatorGateAll(t *testing.T) {
	t.Parallel()
	f := setup(t)
	a := f.admin(t)
	ctx := context.Background()

	changes := f.own(t, capsuletest.New().Set("review.operator_gate", "all").
		Stub(map[string]any{"reviews": []any{"CHANGES_REQUESTED"}}))
	rejected := f.own(t, capsuletest.New().Set("review.operator_gate", "all").
		Stub(map[string]any{"reviews": []any{"REJECTED"}}))
	f.publish(t, changes.Sealed(t))
	f.publish(t, rejected.Sealed(t))
	f.waitState(t, changes.ID(), capsule.WaitingForOperator)
	f.waitState(t, rejected.ID(), capsule.WaitingForOperator)

	pending, err := a.Pending(ctx)
	require.NoError(t, err)
	verdicts := map[string]capsule.Verdict{}
	for _, p := range pending {
		verdicts[p.CapsuleID] = p.Verdict
		require.NotEmpty(t, p.Findings, "the review's findings are shown")
	}
	require.Equal(t, capsule.ChangesRequested, verdicts[changes.ID()])
	require.Equal(t, capsule.Rejected, verdicts[rejected.ID()])

	s, err := a.Decide(ctx, changes.ID(), admin.DecisionReject, "not worth another cycle", "dora")
	require.NoError(t, err)
	require.Equal(t, capsule.Halted, s.State)
	require.Equal(t, capsule.OperatorRejected().String(), s.HaltReason)
	_, err = a.Decide(ctx, changes.ID(), admin.DecisionReject, "again", "dora")
	require.NoError(t, err, "a recorded rejection is finished, not refused")

	_, err = a.Decide(ctx, rejected.ID(), admin.DecisionAccept, "good enough for me", "dora")
	require.NoError(t, err)
	s = f.wait(t, rejected.ID())
	require.Equal(t, capsule.Completed, s.State, "the operator overrides a rejection")
	requireOutcomes(t, f, 2)
	require.Equal(t, int64(2), f.executed.Load(), "no automatic revision")
}
