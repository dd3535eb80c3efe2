package jspub

import "github.com/nats-io/nats.go"

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
