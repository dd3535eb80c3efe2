package adminsvc

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
	"github.com/sagad/sagad/store"
)

func init() {
	schemaFor[VerbStatus], schemaFor[VerbReport], schemaFor[VerbList] = "status-request", "report-request", "capsule-list-request"
	schemaFor[VerbHistory], schemaFor[VerbWait], schemaFor[VerbEvents] = "history-request", "wait-request", "events-request"
	replySchema[VerbStatus], replySchema[VerbReport], replySchema[VerbList] = "status-reply", "report-reply", "capsule-list-reply"
	replySchema[VerbHistory], replySchema[VerbWait], replySchema[VerbEvents] = "history-reply", "wait-reply", "events-reply"
}

// TestReadVerbs drives every read verb over NATS against a real pipeline,
// requests and replies checked against schemas/admin; lists and histories
// come in pages.
func TestReadVerbs(t *testing.T) {
	t.Parallel()
	f := setup(t)
	start := time.Now().Add(-time.Second).UTC()
	var ids []string
	for range 3 {
		d := capsuletest.New().Set("target", "file:go.mod").Set("constraints.resource_locks_required", []any{"go.mod"})
		f.publish(t, d)
		var w WaitReply
		require.NoError(t, json.Unmarshal(f.do(t, VerbWait, WaitRequest{ID: d.ID(), MaxWaitMS: 20000}, ""), &w))
		require.True(t, w.Settled)
		require.Equal(t, capsule.Completed, w.Status.State)
		ids = append(ids, d.ID())
	}
	id := ids[0]

	s := status(t, f.do(t, VerbStatus, StatusRequest{ID: id}, ""))
	require.Equal(t, capsule.Completed, s.State)
	f.do(t, VerbStatus, StatusRequest{ID: capsuletest.NewID()}, CodeNotFound)

	// A capsule not there yet: the wait ends at max_wait_ms with no status.
	var w WaitReply
	require.NoError(t, json.Unmarshal(f.do(t, VerbWait, WaitRequest{ID: capsuletest.NewID(), MaxWaitMS: 50}, ""), &w))
	require.False(t, w.Settled)
	require.Nil(t, w.Status)

	var all []string
	req := ListRequest{Limit: 2}
	for {
		var page ListReply
		require.NoError(t, json.Unmarshal(f.do(t, VerbList, req, ""), &page))
		require.Equal(t, 3, page.Total)
		require.LessOrEqual(t, len(page.Items), 2)
		for _, s := range page.Items {
			all = append(all, s.CapsuleID)
		}
		if page.NextCursor == "" {
			break
		}
		req.Cursor = page.NextCursor
	}
	require.Equal(t, []string{ids[2], ids[1], ids[0]}, all, "newest first, each once")
	var page ListReply
	require.NoError(t, json.Unmarshal(f.do(t, VerbList, ListRequest{State: "halted"}, ""), &page))
	require.Empty(t, page.Items)
	require.NoError(t, json.Unmarshal(f.do(t, VerbList, ListRequest{Prefix: id[:9]}, ""), &page))
	require.Len(t, page.Items, 1)

	var hist HistoryReply
	require.NoError(t, json.Unmarshal(f.do(t, VerbHistory, HistoryRequest{ID: id}, ""), &hist))
	whole := hist.Events
	require.Equal(t, capsule.EventKind("received"), whole[0].Kind)
	var paged []capsule.Event
	hreq := HistoryRequest{ID: id, Limit: 4}
	for {
		var hist HistoryReply
		require.NoError(t, json.Unmarshal(f.do(t, VerbHistory, hreq, ""), &hist))
		paged = append(paged, hist.Events...)
		if hist.NextCursor == "" {
			break
		}
		hreq.Cursor = hist.NextCursor
	}
	require.Equal(t, len(whole), len(paged))

	var rep ReportReply
	require.NoError(t, json.Unmarshal(f.do(t, VerbReport, StatusRequest{ID: id}, ""), &rep))
	require.Equal(t, id, rep.Checkpoint.CapsuleID)
	require.NotNil(t, rep.Capsule)

	// Events: everything since start, then nothing new (the wait ends at
	// max_wait_ms), from the cursor.
	var ev EventsReply
	require.NoError(t, json.Unmarshal(f.do(t, VerbEvents, EventsRequest{ID: id, Since: &start, From: &start, MaxWaitMS: 5000}, ""), &ev))
	require.NotEmpty(t, ev.Revisions)
	last := ev.Revisions[len(ev.Revisions)-1]
	require.Equal(t, capsule.EventKind("completed"), last.Events[len(last.Events)-1].Kind)
	for !ev.CaughtUp {
		ev = EventsReply{}
		require.NoError(t, json.Unmarshal(f.do(t, VerbEvents, EventsRequest{ID: id, Cursor: ev.NextCursor, MaxWaitMS: 5000}, ""), &ev))
	}
	began := time.Now()
	cursor := ev.NextCursor
	ev = EventsReply{}
	require.NoError(t, json.Unmarshal(f.do(t, VerbEvents, EventsRequest{ID: id, Cursor: cursor, MaxWaitMS: 200}, ""), &ev))
	require.Empty(t, ev.Revisions)
	require.Empty(t, ev.Events)
	require.GreaterOrEqual(t, time.Since(began), 200*time.Millisecond)

	for verb, body := range map[string]string{
		VerbStatus:  `{"id":"a","id":"b"}`,
		VerbList:    `{"limit":1001}`,
		VerbHistory: `{"id":"x","cursor":"` + strings.Repeat("9", 200) + `"}`,
		VerbWait:    `{"id":"x","max_wait_ms":25001}`,
		VerbEvents:  `{"id":"a.b"}`,
	} {
		f.do(t, verb, []byte(body), CodeBadRequest)
	}
	f.do(t, VerbList, ListRequest{Cursor: "not-a-cursor"}, CodeBadRequest)
	f.do(t, VerbEvents, EventsRequest{Cursor: "1:2"}, CodeBadRequest)
	f.do(t, VerbEvents, []byte(`{"since":"2030-1-2T3:04:05Z"}`), CodeBadRequest)
}

// TestLongPollsDoNotQueue: a waiting request holds up no other of its
// verb: a second wait is answered while the first still waits.
func TestLongPollsDoNotQueue(t *testing.T) {
	t.Parallel()
	f := setup(t)
	slow := make(chan error, 1)
	go func() {
		_, err := f.client.Wait(t.Context(), capsuletest.NewID(), 3*time.Second)
		slow <- err
	}()
	d := capsuletest.New()
	f.publish(t, d)
	began := time.Now()
	r, err := f.client.Wait(t.Context(), d.ID(), 20*time.Second)
	require.NoError(t, err)
	require.True(t, r.Settled)
	require.Less(t, time.Since(began), 3*time.Second, "the second wait was not held behind the first")
	require.NoError(t, <-slow)
	_ = admin.MaxEventsWait
}

// TestReplayRequestIDOnce: a replay sent again with its request_id after
// the run it started ended answers that run: no second run starts. A new
// request id does start one.
func TestReplayRequestIDOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d := capsuletest.New().Stub(map[string]any{"fail": "worker out of disk"})
	f.publish(t, d)
	f.waitState(t, d.ID(), capsule.Halted)

	no := false
	req := ReplayRequest{ID: d.ID(), By: "ann", RequestID: "req-1", Dependents: &no}
	var first ReplayReply
	require.NoError(t, json.Unmarshal(f.do(t, VerbReplay, req, ""), &first))
	require.Equal(t, 2, first.Capsule.Run)
	ended := f.waitState(t, d.ID(), capsule.Halted)
	require.Equal(t, 2, ended.Run)

	var again ReplayReply
	require.NoError(t, json.Unmarshal(f.do(t, VerbReplay, req, ""), &again))
	require.Equal(t, 2, again.Capsule.Run, "the same request: the same run")
	require.Equal(t, capsule.Halted, again.Capsule.State)
	s, err := f.pipeline.Status(t.Context(), d.ID())
	require.NoError(t, err)
	require.Equal(t, 2, s.Run, "no second run started")

	req.RequestID = "req-2"
	var other ReplayReply
	require.NoError(t, json.Unmarshal(f.do(t, VerbReplay, req, ""), &other))
	require.Equal(t, 3, other.Capsule.Run)

	req.RequestID = "no.dots"
	f.do(t, VerbReplay, req, CodeBadRequest)
}

// TestReadRepliesStayBounded: however large the checkpoints, a list page
// stays under NATS's max payload (1 MiB) and paging still reaches every
// capsule.
func TestReadRepliesStayBounded(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)
	ctx := t.Context()
	st, err := store.Ensure(ctx, js, store.Topology{})
	require.NoError(t, err)
	svc, err := Start(nc, admin.New(st, admin.Config{}), Config{Logger: testLogger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, svc.Stop(context.Background())) })
	kv, err := js.KeyValue(ctx, store.CheckpointsBucket)
	require.NoError(t, err)
	big := strings.Repeat("x", 200<<10)
	const n = 12 // 12 × 200 KiB: several pages' worth
	for i := range n {
		id := capsuletest.NewID()
		b, err := json.Marshal(&capsule.Checkpoint{SchemaVersion: capsule.CheckpointSchemaVersion, CapsuleID: id, Key: id, UpdatedAt: time.Now().Add(time.Duration(i) * time.Second),
			State: capsule.CheckpointState{Status: capsule.Halted, HaltReason: "big", Findings: []capsule.Finding{{Message: big}}}})
		require.NoError(t, err)
		_, err = kv.Put(ctx, id, b)
		require.NoError(t, err)
	}
	seen := map[string]bool{}
	req := ListRequest{Limit: admin.MaxListLimit}
	pages := 0
	for {
		body, err := json.Marshal(req)
		require.NoError(t, err)
		msg, err := nc.Request(Subject(VerbList), body, 10*time.Second)
		require.NoError(t, err)
		require.Less(t, len(msg.Data), 1<<20, "a page fits NATS's max payload")
		var page ListReply
		require.NoError(t, json.Unmarshal(msg.Data, &page))
		pages++
		for _, s := range page.Items {
			require.False(t, seen[s.CapsuleID], "each capsule once")
			seen[s.CapsuleID] = true
		}
		if page.NextCursor == "" {
			break
		}
		req.Cursor = page.NextCursor
	}
	require.Len(t, seen, n)
	require.Greater(t, pages, 1)
}
