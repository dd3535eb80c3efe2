package client_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/sagatest"
	"github.com/sagad/sagad/store"
)

// TestNoTopology: against a NATS without sagad's streams and buckets, a
// client cannot bind and a publisher's capsule finds no intake; both say
// so with store.ErrNoTopology rather than a JetStream error.
func TestNoTopology(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	ctx := context.Background()
	_, err := client.NewClient(ctx, js)
	require.ErrorIs(t, err, store.ErrNoTopology)
	_, err = client.NewPublisher(js).Publish(ctx, capsuletest.New().Sealed(t), "")
	require.ErrorIs(t, err, store.ErrNoTopology)
}

// TestPublishStatusListHistoryWait follows one capsule through the
// client's reads: a Wait begun before the capsule exists returns once it
// completes; Status finds it by its id in either case; List filters by
// state; History holds its lifecycle events in time order; an unknown id
// is store.ErrNotFound.
func TestPublishStatusListHistoryWait(t *testing.T) {
	t.Parallel()
	f := sagatest.Run(t, nil)
	ctx := context.Background()
	doc := capsuletest.New()

	waited := make(chan client.Status, 1)
	waitErr := make(chan error, 1)
	go func() {
		s, err := f.Client.Wait(ctx, doc.ID())
		waited <- s
		waitErr <- err
	}()
	seq, err := f.Client.Publish(ctx, doc.Sealed(t), "trace-of-the-producer")
	require.NoError(t, err)
	require.Positive(t, seq)

	var s client.Status
	select {
	case s = <-waited:
		require.NoError(t, <-waitErr)
	case <-time.After(20 * time.Second):
		t.Fatal("Wait never returned")
	}
	require.Equal(t, capsule.Completed, s.State)
	require.Equal(t, doc.ID(), s.CapsuleID)
	require.Equal(t, "trace-of-the-producer", s.TraceID)
	require.Equal(t, 100, s.Progress)
	require.Equal(t, []string{"artifact:" + doc.ID() + "/1"}, s.ArtifactRefs)

	again, err := f.Client.Wait(ctx, doc.ID())
	require.NoError(t, err, "a settled capsule is returned at once")
	require.Equal(t, s.History, again.History)

	upper, err := f.Client.Status(ctx, strings.ToUpper(doc.ID()))
	require.NoError(t, err, "an upper-case UUID names the same capsule")
	require.Equal(t, doc.ID(), upper.Key)
	cp, err := f.Client.Checkpoint(ctx, doc.ID())
	require.NoError(t, err)
	require.Equal(t, client.StatusOf(cp), upper)

	done, err := f.Client.List(ctx, capsule.Completed)
	require.NoError(t, err)
	require.Len(t, done, 1)
	require.Equal(t, doc.ID(), done[0].CapsuleID)
	running, err := f.Client.List(ctx, capsule.InProgress)
	require.NoError(t, err)
	require.Empty(t, running)
	all, err := f.Client.List(ctx, "")
	require.NoError(t, err)
	require.Len(t, all, 1)

	events, err := f.Client.History(ctx, doc.ID())
	require.NoError(t, err)
	require.NotEmpty(t, events)
	require.Equal(t, capsule.EventReceived, events[0].Kind)
	require.Equal(t, capsule.EventCompleted, events[len(events)-1].Kind)
	for i := 1; i < len(events); i++ {
		require.False(t, events[i].At.Before(events[i-1].At), "events in time order")
	}
	ids := map[string]bool{}
	for _, e := range events {
		require.False(t, ids[e.ID], "event %s once", e.ID)
		ids[e.ID] = true
	}

	unknown := capsuletest.NewID()
	_, err = f.Client.Status(ctx, unknown)
	require.ErrorIs(t, err, store.ErrNotFound)
	none, err := f.Client.History(ctx, unknown)
	require.NoError(t, err, "no history is an empty history")
	require.Empty(t, none)
}

// TestWaitEndsWithItsContext: a Wait on a capsule that goes on (its
// executor holds) returns the context's error when the context ends, and
// a Wait on the capsule once it is released returns it completed.
func TestWaitEndsWithItsContext(t *testing.T) {
	t.Parallel()
	f := sagatest.Run(t, nil)
	doc := f.Own(t, capsuletest.New().Set("task.kind", "slow"))
	f.Publish(t, doc.Sealed(t))
	natstest.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool { return f.Executed.Load() == 1 }, "the executor was called")

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := f.Client.Wait(ctx, doc.ID())
	require.ErrorIs(t, err, context.DeadlineExceeded)

	f.Gate <- struct{}{}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	s, err := f.Client.Wait(ctx2, doc.ID())
	require.NoError(t, err)
	require.Equal(t, capsule.Completed, s.State)
}

// TestStatusOfWaiting: a waiting capsule's status says what it waits on —
// its dependencies, or its wave's capacity — and which of them.
func TestStatusOfWaiting(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		trigger capsule.Trigger
		pending []string
		want    string
	}{
		{capsule.TriggerDependencies, []string{"a", "b"}, "dependencies"},
		{capsule.TriggerWaveCapacity, []string{"wave-1"}, "wave_capacity"},
	} {
		cp := store.NewCheckpoint("k", "k", "t", "", "d", at)
		cp.State.Status = capsule.Waiting
		cp.State.Pause = &capsule.PauseInfo{Trigger: tc.trigger, At: at}
		cp.State.WaitingFor = tc.pending
		s := client.StatusOf(cp)
		require.Equal(t, tc.want, s.WaitingOn)
		require.Equal(t, tc.pending, s.Pending)
		require.False(t, client.Settled(s), "a waiting capsule goes on by itself")
	}
	cp := store.NewCheckpoint("k", "k", "t", "", "d", at)
	s := client.StatusOf(cp)
	require.Empty(t, s.WaitingOn, "only a waiting capsule waits on something")
	require.Empty(t, s.Pending)
	require.False(t, client.Settled(s), "in progress")
	for _, st := range []capsule.State{capsule.Completed, capsule.Halted, capsule.Cancelled, capsule.Paused, capsule.WaitingForOperator} {
		require.True(t, client.Settled(client.Status{State: st}), "%s needs nobody's wait", st)
	}
	require.False(t, client.Settled(client.Status{State: capsule.Paused, AwaitingExternal: true}), "accepted work reports by itself")
}
