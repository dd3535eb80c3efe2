package status

import (
	"sync"
	"time"
)

// Call is an agent call running in this sagad, as its stream shows it so
// far: what `sagactl status` and the console's capsule page show of a
// capsule while its executor or reviewer answers. It is transient and
// per-sagad: only the sagad that runs the call knows it, nothing of it is
// stored, and it is gone once the call's phase has decided.
type Call struct {
	// Phase and Cycle are the step that calls: EXECUTION or REVIEW.
	Phase     int    `json:"phase"`
	PhaseName string `json:"phase_name"`
	Cycle     int    `json:"cycle"`
	// Agent names who answers ("<agent>.<owner>.<session>", or a model).
	Agent string `json:"agent"`
	// Subject is where the call was sent (agents), empty for a model.
	Subject string `json:"subject,omitempty"`
	// Chunks and Bytes count the stream's chunks and response bytes.
	Chunks int   `json:"chunks"`
	Bytes  int64 `json:"bytes"`
	// Started is when the call was sent; LastChunk when its last chunk
	// came (absent before the first), LastChunkAgeSecs how long ago that
	// was when the view was read.
	Started          time.Time `json:"started"`
	LastChunk        time.Time `json:"last_chunk,omitzero"`
	LastChunkAgeSecs float64   `json:"last_chunk_age_seconds,omitempty"`
	// Text is the streamed response so far (its last 16 KiB).
	Text string `json:"text,omitempty"`
	// Done says the stream ended; the phase is recording its outcome.
	Done bool `json:"done,omitempty"`
}

// Calls holds the agent calls running in one sagad, by capsule key. The
// pipeline writes it as streams progress; the admin service and the
// console read it. Safe for concurrent use.
type Calls struct {
	mu      sync.Mutex
	calls   map[string]callEntry
	changed chan struct{}
}

type callEntry struct {
	run  string
	call Call
}

// NewCalls returns an empty board.
func NewCalls() *Calls {
	return &Calls{calls: map[string]callEntry{}, changed: make(chan struct{})}
}

// Put records what the call of run (a delivery's claim token) on key shows
// now. A later run's call replaces an earlier one's.
func (c *Calls) Put(key, run string, call Call) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[key] = callEntry{run: run, call: call}
	c.notify()
}

// Drop forgets the call of run on key, when it is still the one recorded.
func (c *Calls) Drop(key, run string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.calls[key]; ok && e.run == run {
		delete(c.calls, key)
		c.notify()
	}
}

// Get returns the call running on key, with its last chunk's age at now.
func (c *Calls) Get(key string, now time.Time) (Call, bool) {
	if c == nil {
		return Call{}, false
	}
	c.mu.Lock()
	e, ok := c.calls[key]
	c.mu.Unlock()
	if !ok {
		return Call{}, false
	}
	call := e.call
	if !call.LastChunk.IsZero() {
		call.LastChunkAgeSecs = max(now.Sub(call.LastChunk).Seconds(), 0)
	}
	return call, true
}

// Changed returns a channel closed at the next change of any call.
func (c *Calls) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// notify wakes whoever waits on Changed; the caller holds c.mu.
func (c *Calls) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}
