package adminsvc

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
)

// Read verbs: what `sagactl status`, `list`, `history`, `report`, `wait`,
// `watch` and shell completion show, served by sagad so that an operator
// needs no JetStream rights.
const (
	VerbStatus  = "status"
	VerbList    = "list"
	VerbHistory = "history"
	VerbReport  = "report"
	VerbWait    = "wait"
	VerbEvents  = "events"
)

// ReadVerbs lists the read verbs (registered after the wave verbs).
var ReadVerbs = []string{VerbStatus, VerbList, VerbHistory, VerbReport, VerbWait, VerbEvents}

// longPoll are the verbs whose requests wait: each is answered on a
// goroutine of its own, so one waiting request holds up no other.
var longPoll = map[string]bool{VerbWait: true, VerbEvents: true}

// maxLongPolls bounds the waiting requests one sagad holds at a time; past
// it, a waiting request is refused internal (the client asks again).
const maxLongPolls = 256

// Reads are the reads the service answers; *admin.Admin implements them.
// Actions that do not are answered internal on the read verbs.
type Reads interface {
	Status(ctx context.Context, id string) (client.Status, error)
	List(ctx context.Context, q admin.ListQuery) (admin.ListPage, error)
	History(ctx context.Context, id, cursor string, limit int) (admin.HistoryPage, error)
	Report(ctx context.Context, id string) (admin.ReportRecord, error)
	Wait(ctx context.Context, id string, maxWait time.Duration) (admin.WaitResult, error)
	Events(ctx context.Context, q admin.EventsQuery) (admin.EventsPage, error)
}

var _ Reads = (*admin.Admin)(nil)

// StatusRequest names the capsule of status, report and history.
type StatusRequest struct {
	// ID is the capsule id or key. Required.
	ID string `json:"id"`
}

// ReportRequest names the capsule to report on.
type ReportRequest = StatusRequest

// ListRequest asks for a page of capsules, most recently updated first.
type ListRequest struct {
	// State keeps only capsules in that state.
	State string `json:"state,omitempty"`
	// Prefix keeps only capsules whose key starts with it.
	Prefix string `json:"prefix,omitempty"`
	// Cursor is the previous page's next_cursor.
	Cursor string `json:"cursor,omitempty"`
	// Limit is the page size: absent or 0 is 100, at most 1000.
	Limit int `json:"limit,omitempty"`
	// Wave, Kind, HaltReason (a prefix), Composition ("<id>" or
	// "<id>#<run>"), Producer and Since (RFC 3339: created at or after)
	// keep only the capsules that match each one given.
	Wave        string `json:"wave,omitempty"`
	Kind        string `json:"kind,omitempty"`
	HaltReason  string `json:"halt_reason,omitempty"`
	Composition string `json:"composition,omitempty"`
	Producer    string `json:"producer,omitempty"`
	Since       string `json:"since,omitempty"`
	// Current leaves out a composition's steps of a superseded loop round
	// or run (admin.SupersededIDs): bulk selects with it.
	Current bool `json:"current,omitempty"`
}

// query is r as the admin's list query; since was checked when decoded.
func (r ListRequest) query() admin.ListQuery {
	q := admin.ListQuery{State: capsule.State(r.State), Prefix: r.Prefix, Cursor: r.Cursor, Limit: r.Limit,
		Wave: r.Wave, Kind: r.Kind, HaltReason: r.HaltReason, Composition: r.Composition, Producer: r.Producer, Current: r.Current}
	if r.Since != "" {
		if t, err := parseDeadline(r.Since); err == nil {
			q.Since = *t
		}
	}
	return q
}

// ListReply is a page of capsules.
type ListReply = admin.ListPage

// HistoryRequest asks for a page of a capsule's lifecycle events.
type HistoryRequest struct {
	// ID is the capsule id or key. Required.
	ID string `json:"id"`
	// Cursor is the previous page's next_cursor.
	Cursor string `json:"cursor,omitempty"`
	// Limit is the page size: absent or 0 is 1000, at most 10000.
	Limit int `json:"limit,omitempty"`
}

// HistoryReply is a page of a capsule's lifecycle events, oldest first.
type HistoryReply = admin.HistoryPage

// ReportReply is the records of a capsule's report (its events are paged
// with history).
type ReportReply = admin.ReportRecord

// WaitRequest waits, at most MaxWaitMS, for a capsule to end or need a
// person.
type WaitRequest struct {
	// ID is the capsule id or key. Required.
	ID string `json:"id"`
	// MaxWaitMS is how long to wait, in milliseconds: at most 25000.
	MaxWaitMS int64 `json:"max_wait_ms,omitempty"`
}

// WaitReply is the capsule's status after the wait.
type WaitReply = admin.WaitResult

// EventsRequest asks for the lifecycle events after a position (a long poll).
type EventsRequest struct {
	// ID is one capsule's key; absent follows every capsule.
	ID string `json:"id,omitempty"`
	// Since starts a first request at the events of that time on.
	Since *time.Time `json:"since,omitempty"`
	// Cursor is the previous reply's next_cursor.
	Cursor string `json:"cursor,omitempty"`
	// From drops transitions stamped before it.
	From *time.Time `json:"from,omitempty"`
	// MaxWaitMS is how long to wait when nothing is new: at most 25000.
	MaxWaitMS int64 `json:"max_wait_ms,omitempty"`
	// Limit bounds the messages one reply covers: absent or 0 is 256, at
	// most 1000.
	Limit int `json:"limit,omitempty"`
}

// EventsReply is what an events request found.
type EventsReply = admin.EventsPage

// maxCursorBytes bounds a cursor.
const maxCursorBytes = 128

func checkCursor(c string) error {
	if len(c) > maxCursorBytes {
		return badRequest("cursor of %d bytes exceeds %d", len(c), maxCursorBytes)
	}
	return nil
}

func checkLimit(n, maxN int) error {
	if n < 0 || n > maxN {
		return badRequest("limit %d: want 0 (the default) to %d", n, maxN)
	}
	return nil
}

func checkWait(ms int64) error {
	if ms < 0 || ms > admin.MaxEventsWait.Milliseconds() {
		return badRequest("max_wait_ms %d: want 0 to %d", ms, admin.MaxEventsWait.Milliseconds())
	}
	return nil
}

// decodeReadRequest decodes a read verb's request; ok is false for other
// verbs.
func decodeReadRequest(verb string, data []byte) (r any, ok bool, err error) {
	switch verb {
	case VerbStatus, VerbReport:
		var w StatusRequest
		if err := strict(data, &w); err != nil {
			return nil, true, err
		}
		if verb == VerbReport {
			return reportRequest(w), true, checkID(w.ID)
		}
		return w, true, checkID(w.ID)
	case VerbList:
		var w ListRequest
		if len(strings.TrimSpace(string(data))) > 0 {
			if err := strict(data, &w); err != nil {
				return nil, true, err
			}
		}
		err := firstErr(checkCursor(w.Cursor), checkLimit(w.Limit, admin.MaxListLimit))
		if err == nil && w.State != "" && !capsule.State(w.State).Valid() {
			err = badRequest("state %q: want one of in_progress, paused, waiting_for_operator, waiting, completed, halted, cancelled", w.State)
		}
		for name, v := range map[string]string{"prefix": w.Prefix, "wave": w.Wave, "kind": w.Kind, "halt_reason": w.HaltReason,
			"composition": w.Composition, "producer": w.Producer} {
			if err == nil && len(v) > maxIDBytes {
				err = badRequest("%s of %d bytes exceeds %d", name, len(v), maxIDBytes)
			}
		}
		if err == nil && w.Since != "" {
			if _, perr := parseDeadline(w.Since); perr != nil {
				err = badRequest("since %q: want an RFC 3339 date-time", w.Since)
			}
		}
		return w, true, err
	case VerbHistory:
		var w HistoryRequest
		if err := strict(data, &w); err != nil {
			return nil, true, err
		}
		return w, true, firstErr(checkID(w.ID), checkCursor(w.Cursor), checkLimit(w.Limit, admin.MaxHistoryLimit))
	case VerbWait:
		var w WaitRequest
		if err := strict(data, &w); err != nil {
			return nil, true, err
		}
		return w, true, firstErr(checkID(w.ID), checkWait(w.MaxWaitMS))
	case VerbEvents:
		var e eventsWire
		if err := strict(data, &e); err != nil {
			return nil, true, err
		}
		w := EventsRequest{ID: e.ID, Cursor: e.Cursor, MaxWaitMS: e.MaxWaitMS, Limit: e.Limit}
		err := firstErr(checkCursor(w.Cursor), checkLimit(w.Limit, admin.MaxEventsLimit), checkWait(w.MaxWaitMS))
		if err == nil && e.Since != nil {
			w.Since, err = parseTime("since", *e.Since)
		}
		if err == nil && e.From != nil {
			w.From, err = parseTime("from", *e.From)
		}
		if err == nil && w.ID != "" {
			if err = checkID(w.ID); err == nil && strings.ContainsAny(w.ID, ".*>") {
				err = badRequest("id %q: must not contain '.', '*' or '>'", w.ID)
			}
		}
		return w, true, err
	}
	return nil, false, nil
}

// eventsWire is EventsRequest as decoded: times are parsed strictly, as
// resume's deadline is.
type eventsWire struct {
	ID        string  `json:"id,omitempty"`
	Since     *string `json:"since,omitempty"`
	Cursor    string  `json:"cursor,omitempty"`
	From      *string `json:"from,omitempty"`
	MaxWaitMS int64   `json:"max_wait_ms,omitempty"`
	Limit     int     `json:"limit,omitempty"`
}

func parseTime(name, s string) (*time.Time, error) {
	t, err := parseDeadline(s)
	if err != nil {
		return nil, badRequest("%s %q: want an RFC 3339 date-time", name, s)
	}
	return t, nil
}

// reportRequest tells report's request from status's.
type reportRequest StatusRequest

// serveRead carries out a decoded read request; ok is false for any other.
func (s *Service) serveRead(ctx context.Context, r any) (reply any, ok bool, err error) {
	switch r.(type) {
	case StatusRequest, reportRequest, ListRequest, HistoryRequest, WaitRequest, EventsRequest:
	default:
		return nil, false, nil
	}
	rd, can := s.a.(Reads)
	if !can {
		return nil, true, errors.New("this sagad's admin actions do not include reads")
	}
	switch r := r.(type) {
	case StatusRequest:
		st, err := rd.Status(ctx, r.ID)
		if err == nil {
			// The call is known only to the sagad that runs it.
			if c, ok := s.cfg.Calls.Get(st.Key, time.Now()); ok {
				st.Call = &c
			}
		}
		return st, true, err
	case reportRequest:
		rep, err := rd.Report(ctx, r.ID)
		return rep, true, err
	case ListRequest:
		page, err := rd.List(ctx, r.query())
		return page, true, err
	case HistoryRequest:
		page, err := rd.History(ctx, r.ID, r.Cursor, r.Limit)
		return page, true, err
	case WaitRequest:
		w, err := rd.Wait(ctx, r.ID, s.maxWait(r.MaxWaitMS))
		return w, true, err
	case EventsRequest:
		q := admin.EventsQuery{Key: r.ID, Cursor: r.Cursor, MaxWait: s.maxWait(r.MaxWaitMS), Limit: r.Limit}
		if r.Since != nil {
			q.Since = *r.Since
		}
		if r.From != nil {
			q.From = *r.From
		}
		page, err := rd.Events(ctx, q)
		return page, true, err
	}
	return nil, true, nil
}

// maxWait is how long a waiting request may wait: what it asks, but
// within the service's own handling timeout (with a margin to answer).
func (s *Service) maxWait(ms int64) time.Duration {
	d := time.Duration(ms) * time.Millisecond
	return max(min(d, s.cfg.Timeout-s.cfg.Timeout/5), 0)
}

// Status returns a capsule's status.
func (c *Client) Status(ctx context.Context, id string) (client.Status, error) {
	var s client.Status
	return s, c.call(ctx, VerbStatus, StatusRequest{ID: id}, &s)
}

// List returns a page of capsules.
func (c *Client) List(ctx context.Context, r ListRequest) (ListReply, error) {
	var p ListReply
	return p, c.call(ctx, VerbList, r, &p)
}

// History returns a page of a capsule's lifecycle events.
func (c *Client) History(ctx context.Context, r HistoryRequest) (HistoryReply, error) {
	var p HistoryReply
	return p, c.call(ctx, VerbHistory, r, &p)
}

// AllHistory pages through a capsule's whole history.
func (c *Client) AllHistory(ctx context.Context, id string) ([]capsule.Event, error) {
	r := HistoryRequest{ID: id}
	out := []capsule.Event{}
	for {
		p, err := c.History(ctx, r)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Events...)
		if p.NextCursor == "" || len(p.Events) == 0 {
			return out, nil
		}
		r.Cursor = p.NextCursor
	}
}

// Report returns the records of a capsule's report.
func (c *Client) Report(ctx context.Context, id string) (ReportReply, error) {
	var p ReportReply
	return p, c.call(ctx, VerbReport, StatusRequest{ID: id}, &p)
}

// Wait waits at most maxWait (25s at most) for a capsule to end or need a
// person.
func (c *Client) Wait(ctx context.Context, id string, maxWait time.Duration) (WaitReply, error) {
	var p WaitReply
	return p, c.call(ctx, VerbWait, WaitRequest{ID: id, MaxWaitMS: maxWait.Milliseconds()}, &p)
}

// Events returns the lifecycle events after a position.
func (c *Client) Events(ctx context.Context, r EventsRequest) (EventsReply, error) {
	var p EventsReply
	return p, c.call(ctx, VerbEvents, r, &p)
}
