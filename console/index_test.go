package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/store"
)

// checkpointBytes is a checkpoint as sagad writes it, for capsule i of n:
// states, phases, waves and halt reasons spread over the capsules.
func checkpointBytes(tb testing.TB, i int, base time.Time) []byte {
	tb.Helper()
	id := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
	cp := store.NewCheckpoint(id, id, fmt.Sprintf("%032x", i), fmt.Sprintf("wave-%d", i%10), "sha256:x", base.Add(time.Duration(i)*time.Millisecond))
	cp.UpdatedAt = base.Add(time.Duration(i) * time.Millisecond)
	cp.State.Phase = capsule.Phase(i % int(capsule.NumPhases))
	cp.State.Cycle = 1
	for p := capsule.Phase(0); p < cp.State.Phase; p++ {
		cp.History = append(cp.History, capsule.Transition{Phase: p, PhaseName: p.String(), Cycle: 1, Outcome: capsule.OutcomePassed, At: cp.UpdatedAt})
	}
	switch i % 5 {
	case 0:
		cp.State.Status = capsule.Completed
	case 1:
		cp.State.Status = capsule.Halted
		cp.State.HaltReason = "budget_exceeded: tokens"
	case 2:
		cp.State.Status = capsule.WaitingForOperator
		cp.State.Pause = &capsule.PauseInfo{Trigger: capsule.TriggerOperatorGate, At: cp.UpdatedAt}
		cp.State.Reviews = []capsule.ReviewEntry{{Cycle: 1, ReviewerID: "r", Verdict: capsule.Approved, Findings: []capsule.Finding{{Message: "<b>fine</b>"}}}}
	case 3:
		cp.State.Status = capsule.Paused
		cp.State.Pause = &capsule.PauseInfo{Trigger: capsule.TriggerOperatorManual, Reason: "look", By: "ann", At: cp.UpdatedAt}
	}
	b, err := json.Marshal(cp)
	require.NoError(tb, err)
	return b
}

// fill loads n checkpoints into a new index the way its watch does.
func fill(tb testing.TB, n int) *Index {
	tb.Helper()
	x := NewIndex(nil, nil)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rows := make(map[string]*Row, n)
	for i := range n {
		r, err := decodeRow(checkpointBytes(tb, i, base), uint64(i+1), base)
		require.NoError(tb, err)
		rows[r.Key] = r
	}
	x.load(rows)
	return x
}

func TestIndexList(t *testing.T) {
	t.Parallel()
	x := fill(t, 1000)
	tests := []struct {
		name      string
		q         Query
		wantTotal int
		wantFirst string
	}{
		{name: "all, newest first", q: Query{Phase: -1}, wantTotal: 1000, wantFirst: "00000000-0000-4000-8000-000000000999"},
		{name: "state", q: Query{Phase: -1, State: capsule.Halted}, wantTotal: 200, wantFirst: "00000000-0000-4000-8000-000000000996"},
		{name: "phase", q: Query{Phase: 3}, wantTotal: 143, wantFirst: "00000000-0000-4000-8000-000000000997"},
		{name: "wave", q: Query{Phase: -1, Wave: "wave-7"}, wantTotal: 100, wantFirst: "00000000-0000-4000-8000-000000000997"},
		{name: "halt prefix", q: Query{Phase: -1, Halt: "budget_"}, wantTotal: 200, wantFirst: "00000000-0000-4000-8000-000000000996"},
		{name: "trigger", q: Query{Phase: -1, Trigger: capsule.TriggerOperatorManual}, wantTotal: 200, wantFirst: "00000000-0000-4000-8000-000000000998"},
		{name: "search any case", q: Query{Phase: -1, Search: "00000000012"}, wantTotal: 11, wantFirst: "00000000-0000-4000-8000-000000000129"},
		{name: "combined", q: Query{Phase: -1, State: capsule.Completed, Wave: "wave-0"}, wantTotal: 100, wantFirst: "00000000-0000-4000-8000-000000000990"},
		{name: "offset", q: Query{Phase: -1, Offset: 10, Limit: 5}, wantTotal: 1000, wantFirst: "00000000-0000-4000-8000-000000000989"},
		{name: "nothing", q: Query{Phase: -1, Wave: "none"}, wantTotal: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := x.List(tt.q)
			require.Equal(t, tt.wantTotal, p.Total)
			if tt.wantFirst == "" {
				require.Empty(t, p.Items)
				return
			}
			require.Equal(t, tt.wantFirst, p.Items[0].CapsuleID)
			for _, r := range p.Items {
				require.True(t, tt.q.match(r))
			}
		})
	}
	require.Len(t, x.List(Query{Phase: -1, Limit: 10_000}).Items, MaxLimit)
	require.Len(t, x.List(Query{Phase: -1}).Items, DefaultLimit)
}

func TestIndexApplyAndInbox(t *testing.T) {
	t.Parallel()
	x := fill(t, 20)
	ch, stop := x.Subscribe()
	defer stop()
	in := x.Inbox(100)
	require.Equal(t, map[string]int{"decide": 4, "paused": 4, "waiting": 0, "halted": 4}, in.Counts)
	require.Equal(t, "budget_exceeded: tokens", in.Halted[0].HaltReason, "halted capsules are the inbox's dead letters")
	require.Equal(t, capsule.Approved, in.Decide[0].Verdict)
	require.Equal(t, "<b>fine</b>", in.Decide[0].Findings[0].Message)
	require.Len(t, x.Inbox(2).Decide, 2)
	require.True(t, x.Inbox(2).Truncated)

	// A newer write replaces the row and moves it to the top; an older one
	// seen late is ignored.
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r, err := decodeRow(checkpointBytes(t, 2, base.Add(time.Hour)), 100, base)
	require.NoError(t, err)
	x.apply(r)
	require.Equal(t, r, (<-ch).Row)
	require.Equal(t, r.Key, x.List(Query{Phase: -1}).Items[0].Key)
	old, err := decodeRow(checkpointBytes(t, 2, base.Add(2*time.Hour)), 50, base)
	require.NoError(t, err)
	x.apply(old)
	require.Equal(t, r.Key, x.List(Query{Phase: -1}).Items[0].Key)
	require.Equal(t, uint64(100), x.List(Query{Phase: -1}).Items[0].Revision)

	x.apply(&Row{Key: r.Key, Revision: 101, Deleted: true})
	got := (<-ch).Row
	require.True(t, got.Deleted)
	require.Equal(t, r.CapsuleID, got.CapsuleID)
	_, ok := x.Lookup(r.CapsuleID)
	require.False(t, ok)
	require.Equal(t, 19, x.Len())

	// A subscriber that does not read gets a resync, never blocks the index.
	slow, stopSlow := x.Subscribe()
	defer stopSlow()
	for i := range 1000 {
		r, err := decodeRow(checkpointBytes(t, i%20, base.Add(time.Duration(i)*time.Second)), uint64(200+i), base)
		require.NoError(t, err)
		x.apply(r)
	}
	var resync bool
	for len(slow) > 0 {
		if (<-slow).Resync {
			resync = true
		}
	}
	require.True(t, resync)
}

func TestParseQuery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    Query
		wantErr string
	}{
		{in: "", want: Query{Phase: -1}},
		{in: "state=paused&phase=EXECUTION&wave=w&halt=budget&trigger=operator_manual&q=+ab+&offset=5&limit=7",
			want: Query{State: capsule.Paused, Phase: 4, Wave: "w", Halt: "budget", Trigger: capsule.TriggerOperatorManual, Search: "ab", Offset: 5, Limit: 7}},
		{in: "phase=4", want: Query{Phase: 4}},
		{in: "state=asleep", wantErr: `state "asleep"`},
		{in: "trigger=wave_capacity", want: Query{Phase: -1, Trigger: capsule.TriggerWaveCapacity}},
		{in: "trigger=napping", wantErr: `trigger "napping": want one of budget_warning, deadline_approaching,`},
		{in: "phase=9", wantErr: `phase "9"`},
		{in: "phase=NOPE", wantErr: `phase "NOPE"`},
		{in: "offset=-1", wantErr: `offset "-1"`},
		{in: "limit=x", wantErr: `limit "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			v, err := url.ParseQuery(tt.in)
			require.NoError(t, err)
			q, err := parseQuery(v)
			if tt.wantErr != "" {
				require.ErrorIs(t, err, errBadQuery)
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, q)
		})
	}
}

// BenchmarkListEndpoint measures the list endpoint over 100,000 checkpoints
// in the index: the first page unfiltered, the first page of a filter, a
// deep page, and the first page right after a change (which re-sorts).
func BenchmarkListEndpoint(b *testing.B) {
	const n = 100_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	x := fill(b, n)
	runtime.GC()
	runtime.ReadMemStats(&after)
	rowBytes := float64(after.HeapAlloc-before.HeapAlloc) / n
	c := &Console{cfg: Config{}.withDefaults(), index: x}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	changed, err := decodeRow(checkpointBytes(b, 7, base.Add(time.Hour)), n+1, base)
	require.NoError(b, err)
	for _, bc := range []struct {
		name, query string
		change      bool
	}{
		{name: "first-page", query: ""},
		{name: "filtered", query: "state=paused&wave=wave-3"},
		{name: "search", query: "q=00000004217"},
		{name: "deep-page", query: "offset=90000&limit=50"},
		{name: "after-change", query: "", change: true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if bc.change {
					changed.Revision++
					r := *changed
					x.apply(&r)
				}
				rec := httptest.NewRecorder()
				c.listCapsules(rec, httptest.NewRequest(http.MethodGet, "/ui/api/capsules?"+bc.query, nil))
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
			b.ReportMetric(rowBytes, "index-B/capsule")
		})
	}
	b.Run("inbox", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rec := httptest.NewRecorder()
			c.getInbox(rec, httptest.NewRequest(http.MethodGet, "/ui/api/inbox", nil))
		}
	})
}

// FuzzParseQuery: any query string is a query or a bad-query error, and a
// query never selects a page beyond its bounds.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"", "state=paused&phase=4&offset=5&limit=7", "phase=EXECUTION", "limit=999999999999999999999", "q=%00", "state=%ff", "trigger=wave_capacity", "trigger=%ff"} {
		f.Add(s)
	}
	x := fill(f, 50)
	f.Fuzz(func(t *testing.T, s string) {
		v, err := url.ParseQuery(s)
		if err != nil {
			return
		}
		q, err := parseQuery(v)
		if err != nil {
			require.ErrorIs(t, err, errBadQuery)
			return
		}
		p := x.List(q)
		require.LessOrEqual(t, len(p.Items), MaxLimit)
		require.LessOrEqual(t, len(p.Items), p.Total)
	})
}
