package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/status"
	"github.com/sagad/sagad/store"
)

// The reads below are what `sagactl status`, `list`, `history`, `report`,
// `wait`, `watch` and shell completion show. sagad serves them on its admin
// service so that an operator needs no JetStream rights at all: every reply
// is bounded (paged, and kept under [MaxReplyBytes]) whatever the data.

// MaxReplyBytes bounds the encoded items of one paged reply, well under
// NATS's default max_payload (1 MiB) so the envelope always fits.
const MaxReplyBytes = 768 << 10

// List bounds.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// ListQuery selects a page of capsules, most recently updated first.
type ListQuery struct {
	// State keeps only capsules in that state; empty keeps all.
	State capsule.State
	// Prefix keeps only capsules whose key starts with it (completion).
	Prefix string
	// Cursor is a previous page's NextCursor; empty starts at the newest.
	Cursor string
	// Limit is the page size: 0 is [DefaultListLimit], at most [MaxListLimit].
	Limit int
	// Wave keeps only the capsules of that wave.
	Wave string
	// Kind keeps only the capsules of that task kind (read from the kept
	// bytes: the checkpoint does not record it).
	Kind string
	// HaltReason keeps only the capsules whose halt reason starts with it
	// ("executor_failed" or the whole "executor_failed:timeout").
	HaltReason string
	// Composition keeps only the steps of that composition or chain id
	// (every run's; "<id>#<run>" for one run from 2).
	Composition string
	// Producer keeps only the capsules from that producer account.
	Producer string
	// Since keeps only the capsules created at or after it.
	Since time.Time
	// Current leaves out a composition's steps of a superseded loop round
	// or run ([SupersededIDs]): what a bulk selection acts on.
	Current bool
}

// keep is q's filter on checkpoints; kinds are the task kinds by key
// (needed only with Kind).
func (q ListQuery) keep(kinds map[string]string) func(cp *capsule.Checkpoint) bool {
	return func(cp *capsule.Checkpoint) bool {
		switch {
		case q.State != "" && cp.State.Status != q.State,
			q.Wave != "" && cp.WaveID != q.Wave,
			q.Kind != "" && kinds[cp.Key] != q.Kind,
			q.HaltReason != "" && !strings.HasPrefix(cp.State.HaltReason, q.HaltReason),
			q.Composition != "" && !inComposition(cp.Chain, q.Composition),
			q.Producer != "" && cp.Producer != q.Producer,
			!q.Since.IsZero() && cp.CreatedAt.Before(q.Since):
			return false
		}
		return true
	}
}

// inComposition reports whether a step of chain belongs to id: a
// composition or chain id (any run), or "<id>#<run>".
func inComposition(chain *capsule.ChainStep, id string) bool {
	if chain == nil {
		return false
	}
	base, run, one := strings.Cut(id, "#")
	if chain.ID != base {
		return false
	}
	return !one || run == strconv.Itoa(max(chain.Run, 1))
}

// ListPage is one page of capsules.
type ListPage struct {
	Items []status.Status `json:"items"`
	// NextCursor continues the listing; empty on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
	// Total is how many capsules matched the filters when the page was read.
	Total int `json:"total"`
}

// listCursor is the position after an item in newest-first order: its
// update time and capsule id, so a page boundary stays put while capsules
// before it change.
func listCursor(s status.Status) string {
	return s.UpdatedAt.UTC().Format(time.RFC3339Nano) + "|" + s.CapsuleID
}

func after(s status.Status, at time.Time, id string) bool {
	if c := at.Compare(s.UpdatedAt); c != 0 {
		return c > 0
	}
	return strings.Compare(s.CapsuleID, id) > 0
}

// reads binds the read side to the store.
func (a *Admin) reads() *status.Reader {
	return status.NewReader(a.st.JetStream(), a.st.Checkpoints).WithFamilies(a.st.Budgets)
}

// Status returns the status of a capsule id (or key).
func (a *Admin) Status(ctx context.Context, id string) (status.Status, error) {
	return a.reads().Status(ctx, id)
}

// List returns a page of capsules, most recently updated first (then by
// capsule id).
func (a *Admin) List(ctx context.Context, q ListQuery) (ListPage, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	var at time.Time
	var atID string
	if q.Cursor != "" {
		ts, id, ok := strings.Cut(q.Cursor, "|")
		t, err := time.Parse(time.RFC3339Nano, ts)
		if !ok || err != nil {
			return ListPage{}, fmt.Errorf("%w: cursor %q is not one this sagad gave", ErrInvalidQuery, q.Cursor)
		}
		at, atID = t, id
	}
	var kinds map[string]string
	if q.Kind != "" {
		var err error
		if kinds, err = a.st.Kinds(ctx); err != nil {
			return ListPage{}, err
		}
	}
	keep := q.keep(kinds)
	if q.Current {
		superseded, filters := a.supersededCheck(), keep
		keep = func(cp *capsule.Checkpoint) bool { return filters(cp) && !superseded.of(ctx, cp) }
	}
	all, err := a.reads().ListWhere(ctx, keep)
	if err != nil {
		return ListPage{}, err
	}
	if q.Prefix != "" {
		all = slices.DeleteFunc(all, func(s status.Status) bool { return !strings.HasPrefix(s.Key, q.Prefix) })
	}
	slices.SortStableFunc(all, func(x, y status.Status) int {
		if c := y.UpdatedAt.Compare(x.UpdatedAt); c != 0 {
			return c
		}
		return strings.Compare(x.CapsuleID, y.CapsuleID)
	})
	page := ListPage{Items: []status.Status{}, Total: len(all)}
	size := 0
	for i, s := range all {
		if q.Cursor != "" && !after(s, at, atID) {
			continue
		}
		b, err := json.Marshal(s)
		if err != nil {
			return ListPage{}, err
		}
		if len(page.Items) == limit || (len(page.Items) > 0 && size+len(b) > MaxReplyBytes) {
			page.NextCursor = listCursor(page.Items[len(page.Items)-1])
			return page, nil
		}
		size += len(b) + 1
		page.Items = append(page.Items, s)
		_ = i
	}
	return page, nil
}

// ErrInvalidQuery is a read request sagad cannot carry out as asked (a
// cursor it did not give).
var ErrInvalidQuery = errors.New("invalid query")

// History bounds.
const (
	DefaultHistoryLimit = 1000
	MaxHistoryLimit     = 10000
)

// HistoryPage is a page of a capsule's lifecycle events, oldest first.
type HistoryPage struct {
	Events []capsule.Event `json:"events"`
	// NextCursor continues the history; empty on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// History returns a page of the lifecycle events of a capsule id (or key),
// oldest first: the cursor is the index of the first event to return.
func (a *Admin) History(ctx context.Context, id, cursor string, limit int) (HistoryPage, error) {
	from := 0
	if cursor != "" {
		if _, err := fmt.Sscanf(cursor, "%d", &from); err != nil || from < 0 || fmt.Sprint(from) != cursor {
			return HistoryPage{}, fmt.Errorf("%w: cursor %q is not one this sagad gave", ErrInvalidQuery, cursor)
		}
	}
	if limit <= 0 {
		limit = DefaultHistoryLimit
	}
	limit = min(limit, MaxHistoryLimit)
	evs, err := a.reads().History(ctx, id)
	if err != nil {
		return HistoryPage{}, err
	}
	page := HistoryPage{Events: []capsule.Event{}}
	size := 0
	for i := from; i < len(evs); i++ {
		b, err := json.Marshal(evs[i])
		if err != nil {
			return HistoryPage{}, err
		}
		if len(page.Events) == limit || (len(page.Events) > 0 && size+len(b) > MaxReplyBytes) {
			page.NextCursor = fmt.Sprint(i)
			break
		}
		size += len(b) + 1
		page.Events = append(page.Events, evs[i])
	}
	return page, nil
}

// ReportRecord is what `sagactl report` builds its report from, besides
// the events it pages through [Admin.History].
type ReportRecord struct {
	Checkpoint *capsule.Checkpoint `json:"checkpoint"`
	// Capsule is the capsule as received; absent when its bytes are no
	// readable capsule, or when with the checkpoint they would not fit one
	// reply (CapsuleOmitted then).
	Capsule        *capsule.Capsule `json:"capsule,omitempty"`
	CapsuleOmitted bool             `json:"capsule_omitted,omitempty"`
	// Continuation is the capsule's current continuation, when paused.
	Continuation *capsule.Continuation `json:"continuation,omitempty"`
}

// Report returns the records of one capsule's report.
func (a *Admin) Report(ctx context.Context, id string) (ReportRecord, error) {
	cp, err := a.st.Checkpoints.Find(ctx, id)
	if err != nil {
		return ReportRecord{}, err
	}
	r := ReportRecord{Checkpoint: cp}
	// The capsule's own bytes and the continuation enrich the report; a
	// missing key leaves their part out rather than failing it.
	if _, c, err := a.st.Raw(ctx, cp.Key); err == nil && c != nil && c.CapsuleID != "" {
		r.Capsule = c
	}
	if c, err := a.st.Continuations.Get(ctx, cp.Key); err == nil {
		r.Continuation = &c
	} else if !errors.Is(err, store.ErrNotFound) {
		return ReportRecord{}, err
	}
	if b, err := json.Marshal(r); err == nil && len(b) > MaxReplyBytes && r.Capsule != nil {
		r.Capsule, r.CapsuleOmitted = nil, true
	}
	return r, nil
}

// WaitResult is the answer of one bounded wait.
type WaitResult struct {
	// Status is the capsule's status; nil while sagad has no capsule of
	// that id (it may still arrive).
	Status *status.Status `json:"status,omitempty"`
	// Settled: the capsule has ended or needs a person.
	Settled bool `json:"settled"`
}

// Wait waits at most maxWait for the capsule to end or need a person and
// returns its status then, and whether it has. An id that is no valid key
// and names no capsule is not found at once.
func (a *Admin) Wait(ctx context.Context, id string, maxWait time.Duration) (WaitResult, error) {
	wctx, cancel := context.WithTimeout(ctx, maxWait)
	defer cancel()
	s, err := a.reads().Wait(wctx, id)
	if err == nil {
		return WaitResult{Status: &s, Settled: true}, nil
	}
	if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
		return WaitResult{}, err
	}
	s, err = a.reads().Status(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return WaitResult{}, nil
	}
	if err != nil {
		return WaitResult{}, err
	}
	return WaitResult{Status: &s, Settled: status.Settled(s)}, nil
}
