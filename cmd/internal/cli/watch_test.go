package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/adminsvc"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/cmd/internal/cli"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// obsFixture is an embedded server with a running pipeline, for the watch,
// report and rules tests.
type obsFixture struct {
	url    string
	js     jetstream.JetStream
	client *client.Client
}

type obsLog struct{ t testing.TB }

func (w obsLog) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func obsSetup(t *testing.T) *obsFixture {
	t.Helper()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)
	ctx := context.Background()
	p, err := pipeline.New(ctx, js, pipeline.Config{
		Logger:     slog.New(slog.NewTextHandler(obsLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Workspace:  capsuletest.Workspace(t),
		Workers:    4,
		AckWait:    2 * time.Second,
		Heartbeat:  300 * time.Millisecond,
		RetryDelay: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, p.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	// Admin commands need a sagad to answer them.
	svc, err := adminsvc.Start(nc, p.Admin(), adminsvc.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	client, err := client.NewClient(ctx, js)
	require.NoError(t, err)
	return &obsFixture{url: s.ClientURL(), js: js, client: client}
}

type obsResult struct {
	code        int
	out, errOut string
}

// run runs sagactl in-process against the fixture's server.
func (f *obsFixture) run(args ...string) obsResult {
	var out, errOut bytes.Buffer
	code := cli.Main(append([]string{"--nats-url", f.url}, args...), &out, &errOut)
	return obsResult{code: code, out: out.String(), errOut: errOut.String()}
}

// start runs sagactl in the background; the result arrives on the channel.
func (f *obsFixture) start(args ...string) <-chan obsResult {
	done := make(chan obsResult, 1)
	go func() { done <- f.run(args...) }()
	return done
}

// publish publishes doc and waits until it leaves in_progress.
func (f *obsFixture) publish(t *testing.T, doc capsuletest.Doc) client.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := f.client.Publish(ctx, doc.Sealed(t), "")
	require.NoError(t, err)
	s, err := f.client.Wait(ctx, doc.ID())
	require.NoError(t, err)
	return s
}

// awaitWatchers waits until n consumers read the event stream: a watch has
// subscribed, so whatever is published from now on reaches it.
func (f *obsFixture) awaitWatchers(t *testing.T, n int) {
	t.Helper()
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		st, err := f.js.Stream(context.Background(), store.EventsStream)
		if err != nil {
			return false
		}
		info, err := st.Info(context.Background())
		return err == nil && info.State.Consumers >= n
	}, "no watch subscribed to %s", store.EventsStream)
}

func await(t *testing.T, done <-chan obsResult) obsResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("sagactl watch did not return")
		return obsResult{}
	}
}

// watchLines parses the table output: header, then one line per event
// (findings lines, indented, skipped).
func watchLines(t *testing.T, out string) [][]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.Regexp(t, `^AT\s+CAPSULE\s+EVENT\s+PHASE\s+CYCLE\s+DETAIL$`, lines[0])
	var rows [][]string
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, "    ") {
			continue
		}
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

func TestWatchOneCapsuleLive(t *testing.T) {
	t.Parallel()
	f := obsSetup(t)
	other := f.publish(t, capsuletest.New().Set("target", "file:go.mod").Set("constraints.resource_locks_required", []any{"go.mod"}))
	require.Equal(t, capsule.Completed, other.State)

	doc := capsuletest.New()
	const n = 15 // a capsule that completes on its first cycle emits 15 events
	done := f.start("watch", doc.ID(), "--count", "15", "--timeout", "30s")
	f.awaitWatchers(t, 1)
	require.Equal(t, capsule.Completed, f.publish(t, doc).State)
	r := await(t, done)
	require.Equal(t, cli.ExitOK, r.code, r.errOut)

	history, err := f.client.History(context.Background(), doc.ID())
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(history), n)
	rows := watchLines(t, r.out)
	require.Len(t, rows, n)
	for i, row := range rows {
		ev := history[i]
		require.Equal(t, ev.At.UTC().Format("2006-01-02T15:04:05.000Z"), row[0], "line %d", i)
		require.Equal(t, doc.ID(), row[1], "only the watched capsule")
		require.Equal(t, string(ev.Kind), row[2], "line %d: events in order", i)
		require.Equal(t, []string{strconv.Itoa(int(ev.Phase)), ev.PhaseName, strconv.Itoa(ev.Cycle)}, row[3:6], "line %d", i)
	}
	require.Equal(t, "received", rows[0][2])
	require.Equal(t, "completed", rows[n-1][2])
	require.NotContains(t, r.out, other.CapsuleID)
}

func TestWatchAllSinceAsJSON(t *testing.T) {
	t.Parallel()
	f := obsSetup(t)
	a := f.publish(t, capsuletest.New())
	b := f.publish(t, capsuletest.New().Set("target", "file:go.mod").Set("constraints.resource_locks_required", []any{"go.mod"}))

	r := f.run("watch", "--since", "5m", "--count", "30", "--timeout", "20s", "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	lines := strings.Split(strings.TrimRight(r.out, "\n"), "\n")
	require.Len(t, lines, 30)
	ids := map[string]int{}
	for _, l := range lines {
		var ev capsule.Event
		require.NoError(t, json.Unmarshal([]byte(l), &ev), l)
		require.NotEmpty(t, ev.Kind)
		require.False(t, ev.At.IsZero())
		ids[ev.CapsuleID]++
	}
	require.Equal(t, map[string]int{a.CapsuleID: 15, b.CapsuleID: 15}, ids)
}

func TestWatchStops(t *testing.T) {
	t.Parallel()
	f := obsSetup(t)

	r := f.run("watch", capsuletest.NewID(), "--count", "1", "--timeout", "200ms")
	require.Equal(t, cli.ExitTimeout, r.code, "--count not reached at --timeout")
	require.Contains(t, r.errOut, "timed out after 0 of 1 events")

	r = f.run("watch", "--timeout", "200ms")
	require.Equal(t, cli.ExitOK, r.code, "--timeout without --count is a normal stop: %s", r.errOut)
	require.Len(t, watchLines(t, r.out), 0)

	for _, bad := range []string{"a.b", "*", ">", "a b"} {
		r = f.run("watch", bad)
		require.Equal(t, cli.ExitUsage, r.code, bad)
	}
	r = f.run("watch", "--count", "-1")
	require.Equal(t, cli.ExitUsage, r.code)
}

// consumers is how many consumers the stream has.
func (f *obsFixture) consumers(t *testing.T, stream string) int {
	t.Helper()
	st, err := f.js.Stream(context.Background(), stream)
	require.NoError(t, err)
	info, err := st.Info(context.Background())
	require.NoError(t, err)
	return info.State.Consumers
}

// TestWatchSinceReplaysInTimeOrder: a replay merges the events stream (a
// pause, a resume) with the events derived from checkpoints (transitions
// before and after them) in time order, and a watch leaves no consumer
// behind when it exits.
func TestWatchSinceReplaysInTimeOrder(t *testing.T) {
	t.Parallel()
	f := obsSetup(t)
	ctx := context.Background()
	first := f.publish(t, capsuletest.New())
	require.Equal(t, capsule.Completed, first.State)

	// Park a capsule before EXECUTION, pause it, resume it: the pause and
	// the resume go to the events stream between its transitions.
	r := f.run("phase", "pause", "4")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	held := capsuletest.New().Set("target", "file:go.mod").Set("constraints.resource_locks_required", []any{"go.mod"})
	_, err := f.client.Publish(ctx, held.Sealed(t), "")
	require.NoError(t, err)
	// Its step waits at EXECUTION (the checkpoint shows PLANNING until
	// EXECUTION's claim writes the deferred advances).
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		r := f.run("phase", "list", "-o", "json")
		var phases []admin.PhaseState
		return r.code == cli.ExitOK && json.Unmarshal([]byte(r.out), &phases) == nil && phases[capsule.Execution].Pending == 1
	}, "capsule never reached EXECUTION")
	r = f.run("pause", held.ID(), "--reason", "look first")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	require.Equal(t, cli.ExitOK, f.run("phase", "resume", "4").code)
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		st, err := f.client.Status(ctx, held.ID())
		return err == nil && st.State == capsule.Paused
	}, "capsule never paused")
	r = f.run("resume", held.ID())
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	s, err := f.client.Wait(wctx, held.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.Completed, s.State)

	events := f.consumers(t, store.EventsStream)
	checkpoints := f.consumers(t, "KV_"+store.CheckpointsBucket)
	r = f.run("watch", "--since", "5m", "--timeout", "3s", "-o", "json")
	require.Equal(t, cli.ExitOK, r.code, r.errOut)
	var prev time.Time
	kinds := map[capsule.EventKind]int{}
	lines := strings.Split(strings.TrimRight(r.out, "\n"), "\n")
	for i, l := range lines {
		var ev capsule.Event
		require.NoError(t, json.Unmarshal([]byte(l), &ev), l)
		require.False(t, ev.At.Before(prev), "line %d goes back in time:\n%s", i, r.out)
		prev = ev.At
		kinds[ev.Kind]++
	}
	require.Equal(t, 2, kinds[capsule.EventCompleted], r.out)
	require.Equal(t, 1, kinds[capsule.EventPaused], r.out)

	natstest.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool {
		return f.consumers(t, store.EventsStream) <= events && f.consumers(t, "KV_"+store.CheckpointsBucket) <= checkpoints
	}, "watch left its consumers behind")
}
