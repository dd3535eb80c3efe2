package pipeline_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/rules"
	"github.com/sagad/sagad/schemas"
	"github.com/sagad/sagad/store"
)

// TestConstitutionRecorded: the checkpoint, the status and the outcome of a
// capsule name the constitution it was received under, with the digest of
// this sagad's parameters.
func TestConstitutionRecorded(t *testing.T) {
	t.Parallel()
	cfgRules := rules.Config{DenyPaths: []string{".git", "infra"}}
	f := setupWith(t, func(c *pipeline.Config) { c.Rules = cfgRules })
	// What the admin service reports (sagactl rules): the rules in force,
	// the configured executors' kinds among them.
	want := rules.VersionOf(f.pipe.Rules())
	require.NotEqual(t, rules.VersionOf(rules.Config{}), want)

	doc := f.own(t, capsuletest.New())
	f.publish(t, doc.Sealed(t))
	s := f.wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State, s.HaltReason)
	require.Equal(t, want, s.Constitution)

	ctx := context.Background()
	cp, err := f.client.Checkpoint(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, want, cp.Constitution)
	require.NoError(t, schemas.ValidateValue(schemas.Checkpoint, cp))

	outs, err := f.js.Stream(ctx, store.OutcomesStream)
	require.NoError(t, err)
	out, err := outs.GetLastMsgForSubject(ctx, store.OutcomeSubject(capsule.Completed))
	require.NoError(t, err)
	require.Equal(t, doc.ID(), out.Header.Get(store.HeaderCapsuleID))
	require.Equal(t, want, out.Header.Get(store.HeaderConstitution))
}
