package console

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/capsuletest"
	"github.com/sagad/sagad/internal/natstest"
)

// bulk posts a bulk action as the console's page does.
func (f *fixture) bulk(t *testing.T, verb string, body any) (int, BulkReply, string) {
	t.Helper()
	code, out := f.post(t, "/ui/api/bulk/"+verb, body, nil)
	var r BulkReply
	if code == http.StatusOK {
		require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	}
	return code, r, out
}

// TestBulkActions: one request accepts many capsules, each recorded with
// the operator's name, and lists the one it could not act on; a filter
// selects every capsule it matches; malformed and cross-site requests are
// refused before anything is done.
func TestBulkActions(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	gated := func() string {
		return f.publish(t, capsuletest.New().Set("review.operator_gate", true).Set("wave_id", "w-bulk"))
	}
	a, b, c, d := gated(), gated(), gated(), gated()
	for _, id := range []string{a, b, c, d} {
		f.wait(t, id, capsule.WaitingForOperator)
	}
	var in Inbox
	require.Equal(t, http.StatusOK, f.get(t, "/ui/api/inbox", &in)) // starts the index

	missing := capsuletest.NewID()
	code, r, body := f.bulk(t, BulkAccept, BulkRequest{IDs: []string{a, b, missing, a}, By: "dora", Reason: "looks right"})
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, 3, r.Total, "duplicates count once")
	slices.Sort(r.Done)
	want := []string{a, b}
	slices.Sort(want)
	require.Equal(t, want, r.Done)
	require.Len(t, r.Failed, 1)
	require.Equal(t, missing, r.Failed[0].ID)
	require.Equal(t, "not_found", r.Failed[0].Code)
	for _, id := range []string{a, b} {
		f.wait(t, id, capsule.Completed)
		evs, err := f.client.History(context.Background(), id)
		require.NoError(t, err)
		require.True(t, slices.ContainsFunc(evs, func(e capsule.Event) bool { return e.Kind == capsule.EventOperatorAccepted && e.By == "dora" }))
	}

	// Every capsule the filter matches, the list's query as it is.
	natstest.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return f.console.Index().StateCounts()[capsule.WaitingForOperator] == 2
	})
	filter := "state=waiting_for_operator&wave=w-bulk&offset=40&limit=1"
	code, r, body = f.bulk(t, BulkCancel, BulkRequest{Filter: &filter, By: "erin", Reason: "wrong batch"})
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, 2, r.Total, "offset and limit do not cut a bulk selection")
	require.Empty(t, r.Failed)
	for _, id := range []string{c, d} {
		f.wait(t, id, capsule.Cancelled)
	}

	// Refused before anything is done.
	many := make([]string, MaxBulk+1)
	for i := range many {
		many[i] = capsuletest.NewID()
	}
	bad := "state=asleep"
	for name, req := range map[string]BulkRequest{
		"no operator": {IDs: []string{a}},
		"nothing":     {By: "dora"},
		"both":        {IDs: []string{a}, Filter: &filter, By: "dora"},
		"too many":    {IDs: many, By: "dora"},
		"bad filter":  {Filter: &bad, By: "dora"},
		"an empty id": {IDs: []string{" "}, By: "dora"},
	} {
		code, _, body := f.bulk(t, BulkCancel, req)
		require.Equal(t, http.StatusBadRequest, code, "%s: %s", name, body)
	}
	code, _, body = f.bulk(t, "pause", BulkRequest{IDs: []string{a}, By: "dora"})
	require.Equal(t, http.StatusNotFound, code, body)
	code, _ = f.post(t, "/ui/api/bulk/cancel", BulkRequest{IDs: []string{a}, By: "dora"}, map[string]string{csrfHeader: ""})
	require.Equal(t, http.StatusForbidden, code)
}

func TestIndexKeys(t *testing.T) {
	t.Parallel()
	x := fill(t, 100)
	keys, total := x.Keys(Query{State: capsule.Halted, Phase: -1, Offset: 5, Limit: 1}, 7)
	require.Equal(t, 20, total)
	require.Len(t, keys, 7)
	keys, total = x.Keys(Query{Phase: -1}, MaxBulk)
	require.Equal(t, 100, total)
	require.Len(t, keys, 100)
}

// TestBulkReplayPreview: a bulk replay's dry run says how many of the
// selection would halt again, and which, and changes nothing; the
// capsule page's preview answers one capsule's.
func TestBulkReplayPreview(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	again := f.publish(t, capsuletest.New().Set("target", "file:missing-"+capsuletest.NewID()+".txt"))
	fixable := f.publish(t, capsuletest.New().Stub(map[string]any{"fail": "worker down"}))
	for _, id := range []string{again, fixable} {
		f.wait(t, id, capsule.Halted)
	}
	code, r, body := f.bulk(t, BulkReplay, BulkRequest{IDs: []string{again, fixable}, By: "dora", DryRun: true})
	require.Equal(t, http.StatusOK, code, body)
	require.True(t, r.DryRun)
	require.Equal(t, 2, r.Total)
	require.Len(t, r.Done, 2)
	require.Empty(t, r.Failed)
	require.Len(t, r.WouldHalt, 1)
	require.Equal(t, again, r.WouldHalt[0].ID)
	require.Contains(t, r.WouldHalt[0].HaltReason, "target_missing")
	for _, id := range []string{again, fixable} {
		s, err := f.client.Status(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, 1, s.Run, "a dry run replays nothing")
	}
	code, _, body = f.bulk(t, BulkCancel, BulkRequest{IDs: []string{again}, By: "dora", DryRun: true})
	require.Equal(t, http.StatusBadRequest, code, body)

	code, out := f.post(t, "/ui/api/actions/replay.preview", map[string]any{"id": again, "by": "dora"}, nil)
	require.Equal(t, http.StatusOK, code, out)
	var p map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &p))
	require.Contains(t, p["would_halt"], "target_missing")
}
