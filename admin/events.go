package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/store"
)

// Events long-poll bounds.
const (
	// MaxEventsWait bounds how long one events request waits for news.
	MaxEventsWait = 25 * time.Second
	// DefaultEventsLimit and MaxEventsLimit bound the messages one reply
	// covers.
	DefaultEventsLimit = 256
	MaxEventsLimit     = 1000
)

// EventsQuery asks for the lifecycle events after a position: what
// `sagactl watch` follows and `wait` needs no more than.
type EventsQuery struct {
	// Key is one capsule's key; empty follows every capsule.
	Key string
	// Since starts a first request at the messages stored from then on;
	// ignored with Cursor.
	Since time.Time
	// Cursor is a previous reply's NextCursor.
	Cursor string
	// From drops the transitions stamped before it (a transition is stamped
	// a moment before its checkpoint revision is stored).
	From time.Time
	// MaxWait is how long to wait when nothing is new; at most [MaxEventsWait].
	MaxWait time.Duration
	// Limit bounds the messages read: 0 is [DefaultEventsLimit], at most
	// [MaxEventsLimit].
	Limit int
}

// EventsPage is what an events request found.
type EventsPage struct {
	// Events are those of the events stream (pauses, operator actions,
	// duplicates), in stream order.
	Events []capsule.Event `json:"events"`
	// Revisions are the checkpoint revisions read, in order, each with the
	// events of its capsule's transitions stamped at or after From. A
	// revision repeats the events of the revisions before it: a reader
	// shows, per key, those past what it showed already.
	Revisions []Revision `json:"revisions"`
	// NextCursor continues after what this reply covered.
	NextCursor string `json:"next_cursor"`
	// CaughtUp: both sources had delivered everything stored when this
	// reply was made.
	CaughtUp bool `json:"caught_up"`
}

// Revision is one checkpoint revision's transitions as events.
type Revision struct {
	Key    string          `json:"key"`
	Events []capsule.Event `json:"events"`
}

// eventsCursor is the stream sequence read up to in each source, and the
// time a source with none read yet starts at.
type eventsCursor struct {
	events, checkpoints uint64
	since               time.Time
}

func (c eventsCursor) String() string {
	return fmt.Sprintf("%d:%d:%d", c.events, c.checkpoints, c.since.UnixNano())
}

func parseEventsCursor(s string) (eventsCursor, error) {
	f := strings.Split(s, ":")
	bad := fmt.Errorf("%w: cursor %q is not one this sagad gave", ErrInvalidQuery, s)
	if len(f) != 3 {
		return eventsCursor{}, bad
	}
	e, err1 := strconv.ParseUint(f[0], 10, 64)
	c, err2 := strconv.ParseUint(f[1], 10, 64)
	t, err3 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || e == math.MaxUint64 || c == math.MaxUint64 {
		return eventsCursor{}, bad
	}
	return eventsCursor{events: e, checkpoints: c, since: time.Unix(0, t)}, nil
}

// eventsItem is one message of either source.
type eventsItem struct {
	checkpoint bool
	msg        jetstream.Msg
	err        error
}

// Events reads the lifecycle events after q's position: those already
// stored at once, or else waits up to q.MaxWait for the first new one. It
// reads two sources, the events stream and the checkpoint revisions, each
// with a consumer of its own that it deletes before returning.
func (a *Admin) Events(ctx context.Context, q EventsQuery) (EventsPage, error) {
	cur := eventsCursor{since: q.Since}
	if q.Cursor != "" {
		var err error
		if cur, err = parseEventsCursor(q.Cursor); err != nil {
			return EventsPage{}, err
		}
	}
	if cur.since.IsZero() {
		cur.since = time.Now()
	}
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultEventsLimit
	}
	limit = min(limit, MaxEventsLimit)
	evSubject, cpSubject := store.EventsPrefix+">", "$KV."+store.CheckpointsBucket+".>"
	if q.Key != "" {
		evSubject, cpSubject = store.EventSubject(q.Key), "$KV."+store.CheckpointsBucket+"."+q.Key
	}
	rctx, cancel := context.WithCancel(ctx)
	p := &eventsPoll{a: a, js: a.st.JetStream(), rctx: rctx, items: make(chan eventsItem), since: cur.since, limit: limit}
	defer p.followers.Wait() // after cancel (deferred below, so run first)
	defer cancel()
	if err := p.follow(0, store.EventsStream, evSubject, cur.events); err != nil {
		return EventsPage{}, err
	}
	if err := p.follow(1, "KV_"+store.CheckpointsBucket, cpSubject, cur.checkpoints); err != nil {
		cancel()
		return EventsPage{}, err
	}
	return p.collect(ctx, &cur, q.From, min(max(q.MaxWait, 0), MaxEventsWait))
}

// eventsPoll is one long poll: an ephemeral consumer on the events stream
// (0) and one on the checkpoints' revisions (1), both feeding items until
// the poll ends.
type eventsPoll struct {
	a         *Admin
	js        jetstream.JetStream
	rctx      context.Context
	items     chan eventsItem
	followers sync.WaitGroup
	// caught says which source had nothing pending past what was read.
	caught [2]bool
	since  time.Time
	limit  int
}

// follow starts source i: a consumer on stream filtered to subject from
// after seq (or from the poll's start time), its messages sent to items
// until the poll ends, then deleted.
func (p *eventsPoll) follow(i int, stream, subject string, seq uint64) error {
	cfg := jetstream.ConsumerConfig{
		AckPolicy: jetstream.AckNonePolicy, FilterSubjects: []string{subject},
		InactiveThreshold: time.Minute, MemoryStorage: true, Replicas: 1,
	}
	if seq > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq+1
	} else {
		t := p.since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	}
	cons, err := p.js.CreateConsumer(p.rctx, stream, cfg)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return store.ErrNoTopology
	}
	if err != nil {
		return fmt.Errorf("events %s: %w", subject, err)
	}
	name := cons.CachedInfo().Name
	p.caught[i] = cons.CachedInfo().NumPending == 0
	it, err := cons.Messages(jetstream.PullMaxMessages(p.limit))
	if err != nil {
		p.a.deleteConsumer(p.js, stream, name)
		return fmt.Errorf("events %s: %w", subject, err)
	}
	p.followers.Add(1)
	go func() {
		defer p.followers.Done()
		defer p.a.deleteConsumer(p.js, stream, name)
		defer it.Stop()
		stop := context.AfterFunc(p.rctx, it.Stop)
		defer stop()
		for {
			msg, err := it.Next()
			if err != nil && (p.rctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed)) {
				return
			}
			select {
			case p.items <- eventsItem{checkpoint: i == 1, msg: msg, err: err}:
			case <-p.rctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return nil
}

// collect reads items into a page until the limit, MaxReplyBytes, both
// sources caught up after something was read, or wait ran out; cur moves
// past what the page holds.
func (p *eventsPoll) collect(ctx context.Context, cur *eventsCursor, from time.Time, wait time.Duration) (EventsPage, error) {
	page := EventsPage{Events: []capsule.Event{}, Revisions: []Revision{}}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	read, size := 0, 0
	for read < p.limit && !(read > 0 && p.caught[0] && p.caught[1]) {
		var it eventsItem
		select {
		case it = <-p.items:
		case <-timer.C:
		case <-ctx.Done():
			return EventsPage{}, ctx.Err()
		}
		if it.msg == nil && it.err == nil {
			break // waited long enough
		}
		if it.err != nil {
			return EventsPage{}, fmt.Errorf("events: %w", it.err)
		}
		md, err := it.msg.Metadata()
		if err != nil {
			return EventsPage{}, fmt.Errorf("events: %w", err)
		}
		evs, b := itemEvents(it, from)
		if read > 0 && size+len(b) > MaxReplyBytes {
			break // the rest is the next reply's
		}
		size += len(b)
		read++
		if it.checkpoint {
			cur.checkpoints = md.Sequence.Stream
			p.caught[1] = md.NumPending == 0
			if cp := new(capsule.Checkpoint); len(it.msg.Data()) > 0 && json.Unmarshal(it.msg.Data(), cp) == nil {
				page.Revisions = append(page.Revisions, Revision{Key: cp.Key, Events: nonNil(evs)})
			}
		} else {
			cur.events = md.Sequence.Stream
			p.caught[0] = md.NumPending == 0
			page.Events = append(page.Events, evs...)
		}
	}
	page.NextCursor = cur.String()
	page.CaughtUp = p.caught[0] && p.caught[1]
	return page, nil
}

// itemEvents are the events one item carries (a checkpoint revision's
// since from, or an events message's), cut to fit one reply, and their
// encoding's size.
func itemEvents(it eventsItem, from time.Time) ([]capsule.Event, []byte) {
	var evs []capsule.Event
	if it.checkpoint {
		evs = revisionEvents(it.msg.Data(), from)
	} else if decoded, err := capsule.DecodeEvents(it.msg.Data()); err == nil {
		evs = decoded // what does not decode is not ours to judge; history skips it too
	}
	b, _ := json.Marshal(evs)
	for len(b) > MaxReplyBytes && len(evs) > 0 { // one message alone too big: its last events are cut
		evs = evs[:len(evs)/2]
		b, _ = json.Marshal(evs)
	}
	return evs, b
}

func nonNil(evs []capsule.Event) []capsule.Event {
	if evs == nil {
		return []capsule.Event{}
	}
	return evs
}

// revisionEvents are the events of a checkpoint revision's transitions
// stamped at or after from.
func revisionEvents(data []byte, from time.Time) []capsule.Event {
	if len(data) == 0 {
		return nil // a delete or purge marker
	}
	cp := new(capsule.Checkpoint)
	if json.Unmarshal(data, cp) != nil {
		return nil
	}
	var evs []capsule.Event
	for _, ev := range machine.CheckpointEvents(cp) {
		if !ev.At.Before(from) {
			evs = append(evs, ev)
		}
	}
	return evs
}

// deleteConsumer removes a request's consumer as it returns; one it
// misses, JetStream removes after its inactivity threshold.
func (a *Admin) deleteConsumer(js jetstream.JetStream, stream, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = js.DeleteConsumer(ctx, stream, name)
}
