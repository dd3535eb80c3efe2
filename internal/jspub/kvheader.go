package jspub

import (
	"sync"

	"github.com/nats-io/nats.go"
)

// Headers builds a message's headers at their final size. nats.Header.Set
// makes a slice for every value and the map grows from empty; a write
// carries two to ten headers and sagad makes a score of such messages per
// capsule, so the map is made at its size and the values share one array.
// Keys are used as given, as nats.Header.Set does (NATS headers are
// case-sensitive).
type Headers struct {
	h    nats.Header
	vals []string
}

// NewHeaders makes headers for n values (more may be set, at the cost of a
// second array).
func NewHeaders(n int) Headers {
	return Headers{h: make(nats.Header, n), vals: make([]string, 0, n)}
}

// Set sets key's only value to v, as nats.Header.Set does.
func (h *Headers) Set(key, v string) {
	h.vals = append(h.vals, v)
	i := len(h.vals) - 1
	// Capacity 1: a later Add to this key copies instead of writing over
	// the next key's value.
	h.h[key] = h.vals[i : i+1 : i+1]
}

// Map returns the headers.
func (h *Headers) Map() nats.Header { return h.h }

// NewMsg is nats.NewMsg with h as the headers.
func NewMsg(subject string, data []byte, h Headers) *nats.Msg {
	return &nats.Msg{Subject: subject, Data: data, Header: h.h}
}

// Msg is a message whose memory serves one publish after another: an
// empty header map's first entry allocates its whole table, most of a
// small message's bytes, and sagad sends a dozen such messages a capsule.
// It is for a message made, published with a request ([Publish],
// [Writes.Publish]) and dropped within one call: nats.go turns the headers
// into the request's bytes before the request returns and keeps no
// reference to the message. Nothing may keep the message or its headers
// after Release.
type Msg struct {
	msg  nats.Msg
	h    Headers
	vals []string // the values' own array, of msgVals or largeVals
	pool *sync.Pool
}

// msgVals is the most headers a pooled message holds in its own map and
// array: eight, so that the map stays a single group, which clear empties
// in one step (a larger map is a table, whose clear visits every group).
// A message that needs more still gets them, and Release then drops the
// grown map instead of clearing it.
const msgVals = 8

// largeVals is the same for [GetLargeMsg]'s messages: a capsule's outcome
// carries up to a dozen headers (twelve, with every optional one).
const largeVals = 16

var (
	msgs      = sync.Pool{}
	largeMsgs = sync.Pool{}
)

func init() {
	msgs.New = func() any { return newMsg(&msgs, msgVals) }
	largeMsgs.New = func() any { return newMsg(&largeMsgs, largeVals) }
}

func newMsg(pool *sync.Pool, n int) *Msg {
	p := &Msg{pool: pool, vals: make([]string, n)}
	p.msg.Header = make(nats.Header, n)
	p.h = Headers{h: p.msg.Header, vals: p.vals[:0]}
	return p
}

// GetMsg returns a pooled message to subject with data as its body and
// no headers.
func GetMsg(subject string, data []byte) *Msg { return getMsg(&msgs, subject, data) }

// GetLargeMsg is [GetMsg] for a message of more than eight headers (up to
// sixteen without growing).
func GetLargeMsg(subject string, data []byte) *Msg { return getMsg(&largeMsgs, subject, data) }

func getMsg(pool *sync.Pool, subject string, data []byte) *Msg {
	p := pool.Get().(*Msg)
	p.msg.Subject, p.msg.Data = subject, data
	return p
}

// Headers returns p's headers, to set.
func (p *Msg) Headers() *Headers { return &p.h }

// Msg returns the message to publish.
func (p *Msg) Msg() *nats.Msg { return &p.msg }

// Release empties p and gives it back to the pool.
func (p *Msg) Release() {
	if len(p.msg.Header) > len(p.vals) {
		p.msg.Header = make(nats.Header, len(p.vals))
		p.h.h = p.msg.Header
	} else {
		clear(p.msg.Header)
	}
	clear(p.vals)
	p.h.vals = p.vals[:0]
	p.msg.Subject, p.msg.Data = "", nil
	p.pool.Put(p)
}
