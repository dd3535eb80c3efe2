package cli_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/status"
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
	// Its step waits at EXECUTION (the checkpoint shows PLANNING until
	// EXECUTION's claim writes the deferred advances).
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		r := o.run(t, "phase", "list", "-o", "json")
		var phases []admin.PhaseState
		return r.code == cli.ExitOK && json.Unmarshal([]byte(r.out), &phases) == nil && phases[capsule.Execution].Pending == 1
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

// TestEverythingSaidOnRecord: a resume's answer, a revise's rationale and
// an accept's appear, with who and when, in history (table and JSON), in
// status -o json (from the checkpoint) and in the report.
func TestEverythingSaidOnRecord(t *testing.T) {
	t.Parallel()
	o := setupOnline(t)
	ctx := context.Background()
	cl, err := client.NewClient(ctx, o.js)
	require.NoError(t, err)

	r := o.run(t, "phase", "pause", "4")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	doc := o.own(t, capsuletest.New().Set("review.operator_gate", true))
	r = o.run(t, "publish", file(t, doc.Sealed(t)))
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	// Its step waits at EXECUTION (the checkpoint shows PLANNING until
	// EXECUTION's claim writes the deferred advances).
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		r := o.run(t, "phase", "list", "-o", "json")
		var phases []admin.PhaseState
		return r.code == cli.ExitOK && json.Unmarshal([]byte(r.out), &phases) == nil && phases[capsule.Execution].Pending == 1
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
	r = o.run(t, "wait", doc.ID(), "--timeout", "20s")
	require.Equal(t, cli.ExitHuman, r.code, r.errOut)
	r = o.run(t, "decide", doc.ID(), "revise", "--rationale", "shorter, please", "--by", "carol")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	r = o.run(t, "wait", doc.ID(), "--timeout", "20s")
	require.Equal(t, cli.ExitHuman, r.code, r.errOut)
	r = o.run(t, "decide", doc.ID(), "accept", "--rationale", "good enough", "--by", "erin")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	r = o.run(t, "wait", doc.ID(), "--timeout", "20s")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)

	// history, as a table: each word with who said it.
	r = o.run(t, "history", doc.ID())
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Regexp(t, `resumed .*said: "licence is MIT" \(by dana\)`, r.out)
	require.Regexp(t, `revision_triggered .*shorter, please \(by carol\)`, r.out)
	require.Regexp(t, `operator_accepted .*said: "good enough" \(by erin\)`, r.out)

	// history -o json: the said field, by and at.
	r = o.run(t, "history", doc.ID(), "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var events []capsule.Event
	require.NoError(t, json.Unmarshal([]byte(r.out), &events))
	said := map[capsule.EventKind]capsule.Event{}
	for _, e := range events {
		if e.Said != "" {
			said[e.Kind] = e
		}
	}
	require.Equal(t, "licence is MIT", said[capsule.EventResumed].Said)
	require.Equal(t, "dana", said[capsule.EventResumed].By)
	require.False(t, said[capsule.EventResumed].At.IsZero())
	require.Equal(t, "shorter, please", said[capsule.EventRevisionTriggered].Said)
	require.Equal(t, "carol", said[capsule.EventRevisionTriggered].By)
	require.Equal(t, "good enough", said[capsule.EventOperatorAccepted].Said)

	// status -o json: from the checkpoint, oldest first.
	r = o.run(t, "status", doc.ID(), "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var s client.Status
	require.NoError(t, json.Unmarshal([]byte(r.out), &s))
	require.Len(t, s.Said, 2, "%+v", s.Said)
	require.Equal(t, status.Said{Kind: status.SaidAnswer, Text: "licence is MIT", By: "dana", At: s.Said[0].At}, s.Said[0])
	require.Equal(t, status.Said{Kind: status.SaidRevise, Text: "shorter, please", By: "carol", Cycle: 1, At: s.Said[1].At}, s.Said[1])
	require.True(t, s.Said[0].At.Before(s.Said[1].At))

	// status, as a table: a section of its own.
	r = o.run(t, "status", doc.ID())
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Regexp(t, `(?m)^said:\n\s+AT\s+KIND\s+BY\s+CYCLE\s+TEXT\n\s+\S+Z\s+answer\s+dana\s+-\s+"licence is MIT"\n\s+\S+Z\s+revise\s+carol\s+1\s+"shorter, please"$`, r.out)

	// report: its own section, and the words in the continuations.
	r = o.run(t, "report", doc.ID())
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, "## What people said")
	require.Regexp(t, `\| answer \| dana \| - \| licence is MIT \|`, r.out)
	require.Regexp(t, `\| revise \| carol \| 1 \| shorter, please \|`, r.out)
	require.Regexp(t, `\| operator_accepted \| .* \| erin \| .*said: "good enough" \|`, r.out)
}
