package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
)

// TestAttackWorkerAnswersAgentQuery: an answer to an agent's question is
// an operator's resume (saga.admin.resume with answer), which sagad then
// publishes to the question's reply subject from its own connection. A
// worker or a producer holding its own role's seed cannot give one: the
// admin service is not in its account, so the request finds no responder,
// while the operator's same request reaches sagad (refused there only
// because nothing waits for an answer).
func TestAttackWorkerAnswersAgentQuery(t *testing.T) {
	t.Parallel()
	a := newArena(t)
	doc := capsuletest.New()
	a.publish(RoleOperator, doc)
	require.Equal(t, capsule.Completed, a.awaitEnd(doc.ID()))
	before := a.checkpoint(doc.ID())
	req := adminsvc.ResumeRequest{ID: doc.ID(), By: "mallory", Answer: "rm -rf / is fine"}
	for _, role := range []string{"executor-demo", "reviewer-demo-reviewer", RoleProducer} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := adminsvc.NewClient(a.conn(role), adminsvc.ClientConfig{}).Resume(ctx, req)
		cancel()
		require.ErrorIs(t, err, adminsvc.ErrNoSagad, "%s reached sagad's admin service", role)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := adminsvc.NewClient(a.conn(RoleOperator), adminsvc.ClientConfig{}).Resume(ctx, req)
	require.ErrorIs(t, err, admin.ErrRefused, "the operator's answer reaches sagad")
	require.Equal(t, before.Revision(), a.checkpoint(doc.ID()).Revision())
}
