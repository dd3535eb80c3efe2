package console

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
)

// Row is what the console keeps in memory of one checkpoint: enough to
// filter, page and fill the inbox without reading the bucket again. A
// capsule's page reads its whole checkpoint.
type Row struct {
	CapsuleID string        `json:"capsule_id"`
	Key       string        `json:"key"`
	State     capsule.State `json:"state"`
	Phase     int           `json:"phase"`
	PhaseName string        `json:"phase_name"`
	Cycle     int           `json:"cycle"`
	Progress  int           `json:"progress"`
	// Run numbers the capsule's runs (absent: the first): a replay with a
	// corrected capsule changes its bytes, so its title and kind.
	Run    int    `json:"run,omitempty"`
	WaveID string `json:"wave_id,omitempty"`
	// Chain is the capsule's chain and step, when it is a chain's step.
	Chain      *capsule.ChainStep `json:"chain,omitempty"`
	HaltReason string             `json:"halt_reason,omitempty"`
	TraceID    string             `json:"trace_id,omitempty"`
	CreatedAt  time.Time          `json:"created_at"`
	UpdatedAt  time.Time          `json:"updated_at"`
	// Trigger, Reason, By and Since describe the pause or the operator
	// wait of a paused or waiting_for_operator capsule.
	Trigger capsule.Trigger `json:"trigger,omitempty"`
	Reason  string          `json:"reason,omitempty"`
	By      string          `json:"by,omitempty"`
	Since   *time.Time      `json:"since,omitempty"`
	// NeedsYou: a person must act ([admin.PendingOf]).
	NeedsYou bool `json:"needs_you,omitempty"`
	// AwaitingExternal: paused on accepted external work, which reports by
	// itself.
	AwaitingExternal bool `json:"awaiting_external,omitempty"`
	// Verdict and Findings are the review that waits for the operator's
	// decision (waiting_for_operator only).
	Verdict  capsule.Verdict   `json:"verdict,omitempty"`
	Findings []capsule.Finding `json:"findings,omitempty"`
	// Query is the agent's question that waits for an answer (agent_query
	// only), which the inbox's answer box answers.
	Query *admin.PendingQuery `json:"query,omitempty"`
	// WaitingOn and Pending say what a waiting capsule waits for
	// ([client.Status]).
	WaitingOn string   `json:"waiting_on,omitempty"`
	Pending   []string `json:"pending,omitempty"`
	// Revision is the checkpoint's KV revision.
	Revision uint64 `json:"revision"`
	// Deleted is set on the change that removed the checkpoint (retention,
	// purge); such a row is no longer listed.
	Deleted bool `json:"deleted,omitempty"`

	// search is the capsule id and key in lower case, what a search by id
	// looks in.
	search string
}

// rowOf summarises a checkpoint.
func rowOf(cp *capsule.Checkpoint, rev uint64, now time.Time) *Row {
	s := client.StatusOf(cp)
	r := &Row{
		CapsuleID: cp.CapsuleID, Key: cp.Key, State: cp.State.Status, Phase: int(cp.State.Phase), PhaseName: cp.State.Phase.String(),
		Cycle: cp.State.Cycle, Progress: cp.State.Progress, Run: cp.Run, WaveID: cp.WaveID, Chain: cp.Chain, HaltReason: cp.State.HaltReason, TraceID: cp.TraceID,
		CreatedAt: cp.CreatedAt, UpdatedAt: cp.UpdatedAt, AwaitingExternal: s.AwaitingExternal,
		WaitingOn: s.WaitingOn, Pending: s.Pending, Revision: rev,
	}
	if p := cp.State.Pause; p != nil && (cp.State.Status == capsule.Paused || cp.State.Status == capsule.WaitingForOperator) {
		at := p.At
		r.Trigger, r.Reason, r.By, r.Since = p.Trigger, p.Reason, p.By, &at
	}
	if item, ok := admin.PendingOf(cp, now); ok {
		r.NeedsYou = true
		r.Verdict, r.Findings, r.Query = item.Verdict, item.Findings, item.Query
	}
	// A row per capsule is what the console holds in memory: the key
	// (nearly always the id) and the search text share the id's bytes.
	r.search = strings.ToLower(cp.CapsuleID)
	if cp.Key == cp.CapsuleID {
		r.Key = r.CapsuleID
	} else {
		r.search += " " + strings.ToLower(cp.Key)
	}
	return r
}

// sinceOf is when a row's wait began: its pause, else its last update.
func sinceOf(r *Row) time.Time {
	if r.Since != nil {
		return *r.Since
	}
	return r.UpdatedAt
}

// older orders inbox rows by how long they have waited, longest first,
// then by key.
func older(a, b *Row) int {
	if c := sinceOf(a).Compare(sinceOf(b)); c != 0 {
		return c
	}
	return strings.Compare(a.Key, b.Key)
}

// newer orders rows by update time, newest first, then by key.
func newer(a, b *Row) int {
	if c := b.UpdatedAt.Compare(a.UpdatedAt); c != 0 {
		return c
	}
	return strings.Compare(a.Key, b.Key)
}

// Change is one checkpoint written or removed, as the index saw it.
type Change struct {
	Row *Row
	// Resync: this subscriber fell behind and missed changes; it should
	// read again what it shows.
	Resync bool
}

// Index keeps a [Row] per checkpoint, current through a KV watch on the
// checkpoint bucket, and tells subscribers of every change. It is safe for
// concurrent use.
type Index struct {
	log *slog.Logger
	now func() time.Time

	mu   sync.RWMutex
	rows map[string]*Row   // by key
	byID map[string]string // capsule_id → key, for ids stored under another key
	// order is every row by [newer], kept sorted on each change (a binary
	// search and a move of pointers, never a sort of the whole).
	order []*Row
	// decide, paused, waiting and halted are the inbox's lists, each kept
	// in [older] order like order is.
	decide, paused, waiting, halted []*Row
	// states counts the rows by state.
	states map[capsule.State]int
	// superseded are the capsule ids of superseded loop rounds and
	// composition runs ([Index.MarkSuperseded]), by id: a row may come
	// before or after the record that supersedes it.
	superseded map[string]bool
	ready      bool
	subs       map[chan Change]struct{}

	readyCh chan struct{}
}

// NewIndex returns an empty index; [Index.Run] fills it.
func NewIndex(log *slog.Logger, now func() time.Time) *Index {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	return &Index{log: log, now: now, rows: map[string]*Row{}, byID: map[string]string{}, states: map[capsule.State]int{},
		superseded: map[string]bool{}, subs: map[chan Change]struct{}{}, readyCh: make(chan struct{})}
}

// Watcher opens a watch of every checkpoint with its value (the current
// ones, a nil entry, then every change): store.Checkpoints.WatchAll.
type Watcher func(ctx context.Context) (jetstream.KeyWatcher, error)

// Run fills the index from watch and keeps it current until ctx ends. When
// the watch ends early (the bucket went away, the connection was closed
// for good) it opens it again after a second, rebuilding the index from the
// current values, and tells subscribers to resync.
func (x *Index) Run(ctx context.Context, watch Watcher) {
	x.rewatch(ctx, "checkpoint", func(ctx context.Context) error { return x.follow(ctx, watch) })
}

// rewatch runs follow until ctx ends, opening it again a second after it
// ends early, with one WARN line naming what was watched.
func (x *Index) rewatch(ctx context.Context, what string, follow func(context.Context) error) {
	for ctx.Err() == nil {
		err := follow(ctx)
		if ctx.Err() != nil {
			return
		}
		x.log.Warn("console: "+what+" watch ended; opening it again", "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// errWatchClosed: the watcher's channel closed.
var errWatchClosed = errors.New("watcher closed")

func (x *Index) follow(ctx context.Context, watch Watcher) error {
	w, err := watch(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	// The current values go into a fresh map, swapped in whole at the nil
	// entry, so a rebuilt index drops what was deleted meanwhile.
	fresh := map[string]*Row{}
	initial := true
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return errWatchClosed
			}
			if e == nil {
				if initial {
					initial = false
					x.load(fresh)
					fresh = nil
				}
				continue
			}
			row := x.decode(e)
			if row == nil {
				continue
			}
			if initial {
				if row.Deleted {
					delete(fresh, row.Key)
				} else {
					fresh[row.Key] = row
				}
				continue
			}
			x.apply(row)
		}
	}
}

// decode turns a watch entry into a row; nil for one that is no checkpoint.
func (x *Index) decode(e jetstream.KeyValueEntry) *Row {
	if e.Operation() != jetstream.KeyValuePut {
		return &Row{Key: e.Key(), Revision: e.Revision(), Deleted: true}
	}
	row, err := decodeRow(e.Value(), e.Revision(), x.now())
	if err != nil {
		x.log.Warn("console: undecodable checkpoint", "key", e.Key(), "error", err)
		return nil
	}
	if row.Key == "" {
		row.Key = e.Key()
	}
	return row
}

// decodeRow decodes a checkpoint's bytes into its row.
func decodeRow(b []byte, rev uint64, now time.Time) (*Row, error) {
	cp := new(capsule.Checkpoint)
	if err := json.Unmarshal(b, cp); err != nil {
		return nil, err
	}
	return rowOf(cp, rev, now), nil
}

// load replaces every row (the watch's current values) and marks the index
// ready.
func (x *Index) load(rows map[string]*Row) {
	x.mu.Lock()
	x.rows = rows
	x.byID = make(map[string]string, len(rows))
	x.order = make([]*Row, 0, len(rows))
	x.decide, x.paused, x.waiting, x.halted = nil, nil, nil, nil
	x.states = map[capsule.State]int{}
	for k, r := range rows {
		x.states[r.State]++
		x.byID[r.CapsuleID] = k
		x.order = append(x.order, r)
		if l := x.inboxList(r); l != nil {
			*l = append(*l, r)
		}
	}
	slices.SortFunc(x.order, newer)
	for _, l := range []*[]*Row{&x.decide, &x.paused, &x.waiting, &x.halted} {
		slices.SortFunc(*l, older)
	}
	wasReady := x.ready
	x.ready = true
	x.broadcast(Change{Resync: true})
	x.mu.Unlock()
	if !wasReady {
		close(x.readyCh)
	}
}

// apply records one change and tells the subscribers.
func (x *Index) apply(row *Row) {
	x.mu.Lock()
	defer x.mu.Unlock()
	old, had := x.rows[row.Key]
	if had && old.Revision > row.Revision {
		return // an older write seen late
	}
	if had {
		if i, ok := slices.BinarySearchFunc(x.order, old, newer); ok {
			x.order = slices.Delete(x.order, i, i+1)
		}
		if l := x.inboxList(old); l != nil {
			if i, ok := slices.BinarySearchFunc(*l, old, older); ok {
				*l = slices.Delete(*l, i, i+1)
			}
		}
		x.states[old.State]--
		if x.byID[old.CapsuleID] == row.Key {
			delete(x.byID, old.CapsuleID)
		}
	}
	if row.Deleted {
		if had {
			row.CapsuleID = old.CapsuleID
		}
		delete(x.rows, row.Key)
	} else {
		x.rows[row.Key] = row
		x.states[row.State]++
		x.byID[row.CapsuleID] = row.Key
		i, _ := slices.BinarySearchFunc(x.order, row, newer)
		x.order = slices.Insert(x.order, i, row)
		if l := x.inboxList(row); l != nil {
			i, _ := slices.BinarySearchFunc(*l, row, older)
			*l = slices.Insert(*l, i, row)
		}
	}
	x.broadcast(Change{Row: row})
}

// inboxList is the inbox list r belongs in, or nil. x.mu is held.
func (x *Index) inboxList(r *Row) *[]*Row {
	switch {
	case x.superseded[r.CapsuleID]:
		// History of its composition run, shown under it.
		return nil
	case r.NeedsYou && r.State == capsule.WaitingForOperator:
		return &x.decide
	case r.NeedsYou:
		return &x.paused
	case r.State == capsule.Waiting:
		return &x.waiting
	case r.State == capsule.Halted:
		// The dead letters: nothing moves a halted capsule on but an
		// operator's replay (or its cancellation by retention).
		return &x.halted
	}
	return nil
}

// broadcast sends c to every subscriber without blocking: one whose buffer
// is full gets a resync instead of the changes it cannot take. x.mu is held.
func (x *Index) broadcast(c Change) {
	for ch := range x.subs {
		select {
		case ch <- c:
		default:
			// Make room for a resync: what it missed is read again.
			select {
			case <-ch:
			default:
			}
			select {
			case ch <- Change{Resync: true}:
			default:
			}
		}
	}
}

// Subscribe returns a channel of changes and a function that ends the
// subscription.
func (x *Index) Subscribe() (<-chan Change, func()) {
	ch := make(chan Change, 256)
	x.mu.Lock()
	x.subs[ch] = struct{}{}
	x.mu.Unlock()
	return ch, func() {
		x.mu.Lock()
		delete(x.subs, ch)
		x.mu.Unlock()
	}
}

// Ready is closed once the index holds every checkpoint that existed when
// it started.
func (x *Index) Ready() <-chan struct{} { return x.readyCh }

// Len is the number of checkpoints in the index.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.rows)
}

// allStates are the states a capsule can be in, in the order the console
// shows their counts.
var allStates = []capsule.State{capsule.InProgress, capsule.Waiting, capsule.Paused, capsule.WaitingForOperator, capsule.Completed, capsule.Halted, capsule.Cancelled}

// StateCounts is how many capsules are in each state (every state named,
// 0 included).
func (x *Index) StateCounts() map[capsule.State]int {
	m := make(map[capsule.State]int, len(allStates))
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, s := range allStates {
		m[s] = x.states[s]
	}
	return m
}

// Lookup returns the row of a capsule key or id.
func (x *Index) Lookup(id string) (*Row, bool) {
	if cid, ok := capsule.CanonicalID(id); ok {
		id = cid
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	if r, ok := x.rows[id]; ok {
		return r, true
	}
	if k, ok := x.byID[id]; ok {
		r, ok := x.rows[k]
		return r, ok
	}
	return nil, false
}

// Query selects rows. Every non-empty field must match.
type Query struct {
	// State is a capsule.State.
	State capsule.State
	// Phase is a phase number, or -1 for any.
	Phase int
	// Wave is a wave id.
	Wave string
	// Chain is a chain id.
	Chain string
	// Halt is a halt reason, or a prefix of one.
	Halt string
	// Trigger is a pause trigger.
	Trigger capsule.Trigger
	// Search matches a part of the capsule id or key, case-insensitively.
	Search string
	// Offset and Limit select the page, newest update first.
	Offset, Limit int
}

// Page is one page of rows and how many match in all.
type Page struct {
	Items  []*Row `json:"items"`
	Total  int    `json:"total"`
	Offset int    `json:"offset"`
	Limit  int    `json:"limit"`
}

// MaxLimit bounds a page.
const MaxLimit = 500

// DefaultLimit is a page's size when the query names none.
const DefaultLimit = 50

func (q Query) match(r *Row) bool {
	switch {
	case q.State != "" && r.State != q.State,
		q.Phase >= 0 && r.Phase != q.Phase,
		q.Wave != "" && r.WaveID != q.Wave,
		q.Chain != "" && (r.Chain == nil || r.Chain.ID != q.Chain),
		q.Halt != "" && !strings.HasPrefix(r.HaltReason, q.Halt),
		q.Trigger != "" && r.Trigger != q.Trigger:
		return false
	case q.Search != "":
		return strings.Contains(r.search, q.Search)
	}
	return true
}

// List returns the page of rows q selects, most recently updated first:
// one pass over the rows, kept in order, to count the matches and take the
// page; no sort.
func (x *Index) List(q Query) Page {
	if q.Limit <= 0 {
		q.Limit = DefaultLimit
	}
	q.Limit = min(q.Limit, MaxLimit)
	q.Offset = max(q.Offset, 0)
	q.Search = strings.ToLower(q.Search)
	p := Page{Items: []*Row{}, Offset: q.Offset, Limit: q.Limit}
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, r := range x.order {
		if !q.match(r) {
			continue
		}
		if p.Total >= q.Offset && len(p.Items) < q.Limit {
			p.Items = append(p.Items, r)
		}
		p.Total++
	}
	return p
}

// Keys returns the keys of the rows q selects (its offset and limit
// ignored), most recently updated first, the first most of them, and how many
// match in all.
func (x *Index) Keys(q Query, most int) ([]string, int) {
	q.Search = strings.ToLower(q.Search)
	var keys []string
	total := 0
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, r := range x.order {
		// A bulk action leaves a superseded round's capsule alone: it is
		// history of its run, not work to act on.
		if !q.match(r) || x.superseded[r.CapsuleID] {
			continue
		}
		if total < most {
			keys = append(keys, r.Key)
		}
		total++
	}
	return keys, total
}

// Inbox is what needs the operator, and what waits.
type Inbox struct {
	// Decide are the capsules waiting_for_operator, oldest first.
	Decide []*Row `json:"decide"`
	// Paused are the paused capsules only a person can resume, oldest first.
	Paused []*Row `json:"paused"`
	// Waiting are the capsules waiting (dependencies, wave capacity),
	// oldest first.
	Waiting []*Row `json:"waiting"`
	// Halted are the halted capsules, the dead letters: only a replay
	// (perhaps with a corrected capsule) runs them again. Oldest first.
	Halted []*Row `json:"halted"`
	// Truncated: a list was cut at the limit; Counts has the full numbers.
	Truncated bool           `json:"truncated,omitempty"`
	Counts    map[string]int `json:"counts"`
}

// Inbox returns the needs-you lists, each cut at limit.
func (x *Index) Inbox(limit int) Inbox {
	x.mu.RLock()
	defer x.mu.RUnlock()
	in := Inbox{Counts: map[string]int{"decide": len(x.decide), "paused": len(x.paused), "waiting": len(x.waiting), "halted": len(x.halted)}}
	take := func(l []*Row) []*Row {
		if len(l) > limit {
			in.Truncated = true
			l = l[:limit]
		}
		return append([]*Row{}, l...)
	}
	in.Decide, in.Paused, in.Waiting, in.Halted = take(x.decide), take(x.paused), take(x.waiting), take(x.halted)
	return in
}

// parsePhase reads a phase filter: "" is any, else 0–6 or a phase name.
func parsePhase(s string) (int, bool) {
	if s == "" {
		return -1, true
	}
	p, err := capsule.ParsePhase(s)
	return int(p), err == nil
}
