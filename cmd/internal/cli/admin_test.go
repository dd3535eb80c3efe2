package cli_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/capsuletest"
)

// TestOnlineAdmin drives the operator commands as a person would: a gated
// capsule waits, shows in pending, refuses a pause, is revised and accepted;
// a finished capsule refuses actions with exit 5; phases pause and resume.
func TestOnlineAdmin(t *testing.T) {
	t.Parallel()
	o := setupOnline(t)
	doc := o.own(t, capsuletest.New().Set("review.operator_gate", true))
	r := o.run(t, "publish", file(t, doc.Sealed(t)))
	require.Equal(t, cli.ExitOK, r.code, r.errOut)

	r = o.run(t, "wait", doc.ID(), "--timeout", "20s")
	require.Equal(t, cli.ExitHuman, r.code, "waiting_for_operator needs a human: %s", r.errOut)

	r = o.run(t, "pending", "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var pending []admin.PendingItem
	require.NoError(t, json.Unmarshal([]byte(r.out), &pending))
	require.Len(t, pending, 1)
	require.Equal(t, doc.ID(), pending[0].CapsuleID)
	require.Equal(t, capsule.WaitingForOperator, pending[0].State)

	r = o.run(t, "pause", doc.ID())
	require.Equal(t, cli.ExitRefused, r.code, "a waiting capsule is decided, not paused")
	require.Equal(t, "sagactl: cannot pause "+doc.ID()+": the capsule is waiting_for_operator (it already waits for a decision: decide or cancel)\n", r.errOut,
		"sagad's refusal reaches the operator word for word")

	r = o.run(t, "decide", doc.ID(), "revise")
	require.Equal(t, cli.ExitUsage, r.code, "revise needs a rationale")

	r = o.run(t, "decide", doc.ID(), "revise", "--rationale", "shorter", "--by", "carol", "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	r = o.run(t, "wait", doc.ID(), "--timeout", "20s")
	require.Equal(t, cli.ExitHuman, r.code)

	r = o.run(t, "decide", doc.ID(), "accept", "--by", "carol")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	r = o.run(t, "wait", doc.ID(), "--timeout", "20s", "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var s client.Status
	require.NoError(t, json.Unmarshal([]byte(r.out), &s))
	require.Equal(t, 2, s.CyclesUsed)

	for _, args := range [][]string{
		{"pause", doc.ID()}, {"resume", doc.ID()}, {"cancel", doc.ID()}, {"decide", doc.ID(), "accept"},
	} {
		r = o.run(t, args...)
		require.Equal(t, cli.ExitRefused, r.code, "%v on a completed capsule: %s", args, r.errOut)
	}
	r = o.run(t, "pause", "no-such-capsule")
	require.Equal(t, cli.ExitNotFound, r.code)
	require.Contains(t, r.errOut, "never published here", "the not-found hint still applies")

	r = o.run(t, "history", doc.ID())
	require.Equal(t, cli.ExitOK, r.code)
	require.Contains(t, r.out, "revision_triggered")
	require.Contains(t, r.out, "(by carol)")
	r = o.run(t, "history", doc.ID(), "-o", "json")
	require.Equal(t, cli.ExitOK, r.code)
	var events []capsule.Event
	require.NoError(t, json.Unmarshal([]byte(r.out), &events))
	var kinds []capsule.EventKind
	for _, e := range events {
		kinds = append(kinds, e.Kind)
	}
	// History in causal order: each decision before what it caused.
	require.Equal(t, capsule.EventCompleted, kinds[len(kinds)-1], "the accept comes before the end it caused: %v", kinds)
	require.Contains(t, kinds, capsule.EventOperatorAccepted)
	require.Less(t, slices.Index(kinds, capsule.EventRevisionTriggered), slices.Index(kinds, capsule.EventLoopedBack),
		"the revision comes before the loop back it caused: %v", kinds)

	r = o.run(t, "phase", "pause", "EXECUTION", "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var phases []admin.PhaseState
	require.NoError(t, json.Unmarshal([]byte(r.out), &phases))
	require.True(t, phases[capsule.Execution].Paused)
	r = o.run(t, "phase", "resume", "4", "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.NoError(t, json.Unmarshal([]byte(r.out), &phases))
	require.False(t, phases[capsule.Execution].Paused)
	r = o.run(t, "phase", "pause", "9")
	require.Equal(t, cli.ExitUsage, r.code)
}

// TestOnlineRejectInCausalOrder: a rejection reads before the halt it
// caused in the capsule's history.
func TestOnlineRejectInCausalOrder(t *testing.T) {
	t.Parallel()
	o := setupOnline(t)
	doc := o.own(t, capsuletest.New().Set("review.operator_gate", true))
	r := o.run(t, "publish", file(t, doc.Sealed(t)))
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	r = o.run(t, "wait", doc.ID(), "--timeout", "20s")
	require.Equal(t, cli.ExitHuman, r.code, r.errOut)
	r = o.run(t, "decide", doc.ID(), "reject", "--rationale", "wrong target", "--by", "carol")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	r = o.run(t, "history", doc.ID(), "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var events []capsule.Event
	require.NoError(t, json.Unmarshal([]byte(r.out), &events))
	var kinds []capsule.EventKind
	for _, e := range events {
		kinds = append(kinds, e.Kind)
	}
	require.Equal(t, []capsule.EventKind{capsule.EventOperatorRejected, capsule.EventHalted}, kinds[len(kinds)-2:], "%v", kinds)
}

// TestOnlineAdminNoSagad: with the topology in place but no sagad serving
// the admin API, every admin command exits 6 with the subject it asked on,
// and the capsule is unchanged.
func TestOnlineAdminNoSagad(t *testing.T) {
	t.Parallel()
	o := startOnline(t, false)
	doc := o.own(t, capsuletest.New().Set("review.operator_gate", true))
	r := o.run(t, "publish", file(t, doc.Sealed(t)))
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	// Reads go through sagad's admin service too: with none, the test
	// reads the checkpoint itself.
	c, err := client.NewClient(context.Background(), o.js)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := c.Wait(wctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.WaitingForOperator, s.State, "needs a human")

	for _, tt := range []struct {
		args    []string
		subject string
	}{
		{[]string{"cancel", doc.ID()}, "saga.admin.cancel"},
		{[]string{"pause", doc.ID()}, "saga.admin.pause"},
		{[]string{"resume", doc.ID()}, "saga.admin.resume"},
		{[]string{"decide", doc.ID(), "accept"}, "saga.admin.decide"},
		{[]string{"pending", "-o", "json"}, "saga.admin.pending"},
		{[]string{"phase", "pause", "4"}, "saga.admin.phase.pause"},
		{[]string{"phase", "resume", "4"}, "saga.admin.phase.resume"},
		{[]string{"phase", "list"}, "saga.admin.phase.list"},
	} {
		r = o.run(t, tt.args...)
		require.Equal(t, cli.ExitNoSagad, r.code, "%v: %s", tt.args, r.errOut)
		require.Empty(t, r.out)
		require.Equal(t, "sagactl: no sagad answered on "+tt.subject+": is sagad running?\n", r.errOut)
	}
	r = o.run(t, "status", doc.ID(), "-o", "json")
	require.Equal(t, cli.ExitFailure, r.code, "read commands ask sagad too: %s", r.errOut)
	require.Empty(t, r.out)
	s, err = c.Status(context.Background(), doc.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.WaitingForOperator, s.State, "nothing changed")
}

// TestOnlinePauseAll: pause --all stops every phase (a capsule published
// then waits in RECEPTION's queue), resume --all restarts them all and the
// capsule completes; --all refuses an id and per-capsule flags.
func TestOnlinePauseAll(t *testing.T) {
	t.Parallel()
	o := setupOnline(t)
	r := o.run(t, "pause", "--all", "--reason", "upgrade", "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var phases []admin.PhaseState
	require.NoError(t, json.Unmarshal([]byte(r.out), &phases))
	require.Len(t, phases, int(capsule.NumPhases))
	for _, p := range phases {
		require.True(t, p.Paused, "phase %d", p.Phase)
	}

	doc := o.own(t, capsuletest.New())
	r = o.run(t, "publish", file(t, doc.Sealed(t)))
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	r = o.run(t, "wait", "--timeout", "500ms", doc.ID())
	require.Equal(t, cli.ExitNotFound, r.code, "nothing runs while everything is paused: %s", r.errOut)

	r = o.run(t, "resume", "--all")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Regexp(t, `(?m)^0 RECEPTION\s+\S+\s+false\s`, r.out)
	r = o.run(t, "wait", "--timeout", "30s", doc.ID())
	require.Equal(t, cli.ExitOK, r.code, r.errOut)

	for _, args := range [][]string{{"pause", "--all", doc.ID()}, {"resume", "--all", "--tokens", "5"}, {"resume"}} {
		r = o.run(t, args...)
		require.Equal(t, cli.ExitUsage, r.code, "%v: %s", args, r.errOut)
	}
}
