package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/store"
)

// TestWaitTellsExternalWorkFromAHuman: a capsule paused while an executor
// works on accepted work is still running (wait waits on, exit 21 at its
// timeout, then 0 once it completes); one paused for a person exits 3 at once.
func TestWaitTellsExternalWorkFromAHuman(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	ctx := context.Background()
	kv := readsOnly(t, s)
	put := func(id string, st capsule.CheckpointState) {
		t.Helper()
		b, err := json.Marshal(&capsule.Checkpoint{SchemaVersion: capsule.CheckpointSchemaVersion, CapsuleID: id, Key: id, UpdatedAt: time.Now(), State: st})
		require.NoError(t, err)
		_, err = kv.Put(ctx, id, b)
		require.NoError(t, err)
	}
	run := func(args ...string) result { return run(t, append([]string{"--nats-url", s.ClientURL()}, args...)...) }
	paused := func(tr capsule.Trigger, awaiting int) capsule.CheckpointState {
		return capsule.CheckpointState{Phase: capsule.Execution, Cycle: 1, Status: capsule.Paused, AwaitingCycle: awaiting,
			Pause: &capsule.PauseInfo{Trigger: tr, At: time.Now()}}
	}

	const external = "0f8f0000-0000-4000-8000-000000000001"
	put(external, paused(capsule.TriggerBlockedExternal, 1))
	r := run("wait", "--timeout", "300ms", external)
	require.Equal(t, cli.ExitTimeout, r.code, "stdout %s stderr %s", r.out, r.errOut)
	require.Contains(t, r.errOut, "capsule still paused, awaiting the result of accepted external work")
	require.Regexp(t, `(?m)^awaiting:\s+the result of accepted external work`, r.out)

	done := make(chan result, 1)
	go func() { done <- run("wait", "--timeout", "30s", external) }()
	st := paused(capsule.TriggerBlockedExternal, 1)
	st.Status, st.Pause, st.AwaitingCycle, st.Phase = capsule.Completed, nil, 0, capsule.Handoff
	put(external, st)
	r = <-done
	require.Equal(t, cli.ExitOK, r.code, "stdout %s stderr %s", r.out, r.errOut)

	for _, tt := range []struct {
		name string
		st   capsule.CheckpointState
	}{
		{"operator pause", paused(capsule.TriggerOperatorManual, 0)},
		{"blocked_external with nothing awaited", paused(capsule.TriggerBlockedExternal, 0)},
		{"budget warning", paused(capsule.TriggerBudgetWarning, 0)},
	} {
		const human = "0f8f0000-0000-4000-8000-000000000002"
		put(human, tt.st)
		r := run("wait", "--timeout", "30s", human)
		require.Equal(t, cli.ExitHuman, r.code, "%s: stdout %s stderr %s", tt.name, r.out, r.errOut)
		require.NotContains(t, r.out, "awaiting:", tt.name)
	}
}

// TestCompletion: `sagactl completion` exists, and commands taking a capsule
// id complete it from the checkpoint bucket; decide's verdict completes too.
func TestCompletion(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	ctx := context.Background()
	kv := readsOnly(t, s)
	for _, id := range []string{"0f8f0000-0000-4000-8000-000000000001", "0f8f0000-0000-4000-8000-000000000002", "5a6a0000-0000-4000-8000-000000000000"} {
		_, err := kv.Put(ctx, id, []byte(`{"schema_version":"1.0","key":"`+id+`","capsule_id":"`+id+`"}`))
		require.NoError(t, err)
	}

	r := run(t, "completion", "bash")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Contains(t, r.out, "bash completion")

	for _, cmd := range []string{"status", "wait", "history", "watch", "report", "pause", "resume", "cancel", "decide"} {
		r := run(t, "--nats-url", s.ClientURL(), "__complete", cmd, "0f8f")
		require.Equal(t, cli.ExitOK, r.code, r.errOut)
		require.Equal(t, "0f8f0000-0000-4000-8000-000000000001\n0f8f0000-0000-4000-8000-000000000002\n:4\n", firstLines(r.out), cmd)
	}
	r = run(t, "--nats-url", s.ClientURL(), "__complete", "decide", "0f8f0000-0000-4000-8000-000000000001", "")
	require.Equal(t, "accept\nrevise\n:4\n", firstLines(r.out))

	// No server: no ids, and no hang.
	r = run(t, "--nats-url", "nats://127.0.0.1:1", "__complete", "status", "")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Equal(t, ":4\n", firstLines(r.out))
}

// firstLines drops cobra's trailing "Completion ended with directive" line.
func firstLines(out string) string {
	var keep []string
	for _, l := range strings.SplitAfter(out, "\n") {
		if l != "" && !strings.HasPrefix(l, "Completion ended") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "")
}

// readsOnly creates sagad's topology on s and serves its admin service
// (the reads) with no pipeline, and returns the checkpoint bucket to write
// checkpoints into directly.
func readsOnly(t *testing.T, s *server.Server) jetstream.KeyValue {
	t.Helper()
	nc, js := natstest.Connect(t, s)
	ctx := context.Background()
	st, err := store.Ensure(ctx, js, store.Topology{})
	require.NoError(t, err)
	svc, err := adminsvc.Start(nc, admin.New(st, admin.Config{}), adminsvc.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	kv, err := js.KeyValue(ctx, store.CheckpointsBucket)
	require.NoError(t, err)
	return kv
}

// TestCompleteValues: the shell completes the closed sets of values: -o,
// --state, cost --by (issue 35). No server needed.
func TestCompleteValues(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"list", "--state", ""}, "in_progress\npaused\nwaiting_for_operator\nwaiting\ncompleted\nhalted\ncancelled\n:4\n"},
		{[]string{"list", "-o", ""}, "table\nwide\njson\nyaml\njsonpath=\n:6\n"},
		{[]string{"status", "--output", ""}, "table\nwide\njson\nyaml\njsonpath=\n:6\n"},
		{[]string{"cost", "--by", ""}, "wave\nchain\ncomposition\nproducer\nkind\nday\n:4\n"},
	} {
		r := run(t, append([]string{"--nats-url", "nats://127.0.0.1:1", "__complete"}, tt.args...)...)
		require.Equal(t, cli.ExitOK, r.code, r.errOut)
		require.Equal(t, tt.want, firstLines(r.out), "%v", tt.args)
	}
	for _, s := range []string{"in_progress", "paused", "waiting_for_operator", "waiting", "completed", "halted", "cancelled"} {
		require.True(t, capsule.State(s).Valid(), s)
	}
}
