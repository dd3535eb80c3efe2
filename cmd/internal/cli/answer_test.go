package cli_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/store"
)

// TestResumeAnswer: `sagactl resume ID --answer TEXT` records the answer
// with --by in the checkpoint, where the next executor call reads it.
func TestResumeAnswer(t *testing.T) {
	t.Parallel()
	o := setupOnline(t)
	ctx := context.Background()
	cl, err := client.NewClient(ctx, o.js)
	require.NoError(t, err)
	st, err := store.Open(ctx, o.js)
	require.NoError(t, err)

	r := o.run(t, "phase", "pause", "4")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	doc := o.own(t, capsuletest.New())
	r = o.run(t, "publish", file(t, doc.Sealed(t)))
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		s, err := cl.Status(ctx, doc.ID())
		return err == nil && s.Phase == int(capsule.Execution)
	}, "capsule never queued at EXECUTION")
	r = o.run(t, "pause", doc.ID(), "--by", "dana")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	r = o.run(t, "phase", "resume", "4")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		s, err := cl.Status(ctx, doc.ID())
		return err == nil && s.State == capsule.Paused
	}, "capsule never paused")

	r = o.run(t, "resume", doc.ID(), "--answer", "licence is MIT", "--by", "dana")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	cp, _, err := st.Checkpoints.Get(ctx, doc.ID())
	require.NoError(t, err)
	require.NotNil(t, cp.State.OperatorAnswer)
	require.Equal(t, "licence is MIT", cp.State.OperatorAnswer.Text)
	require.Equal(t, "dana", cp.State.OperatorAnswer.By)
	r = o.run(t, "wait", doc.ID(), "--timeout", "20s")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
}
