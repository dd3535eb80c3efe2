package store

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/jspub"
)

// encodeBufs recycles checkpoint encodings: a write's bytes are copied into
// the connection's buffer before the publish returns, so the buffer is free
// again when the write is done.
var encodeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// encoded is a checkpoint's encoding, in a pooled buffer, and the subject
// of its key's writes.
type encoded struct {
	b       []byte
	subject string
	buf     *[]byte
}

// release returns the buffer.
func (e encoded) release() { *e.buf = e.b[:0]; encodeBufs.Put(e.buf) }

// encode encodes cp into a pooled buffer. The history's encoding is kept
// from the capsule's last write by this process (see histories): only the
// transitions since are encoded.
func (s *Checkpoints) encode(cp *capsule.Checkpoint) (encoded, error) {
	e := encoded{buf: encodeBufs.Get().(*[]byte)}
	h := s.hist.take(cp.Key)
	b, err := cp.AppendJSONReusing((*e.buf)[:0], &h.enc)
	e.subject = h.subject
	s.hist.done(cp.Key, h, cp.Terminal())
	if err == nil && (raceChecks || checkEncodings.Load()) {
		checkEncoding(cp, b)
	}
	if err != nil {
		encodeBufs.Put(e.buf)
		return encoded{}, err
	}
	e.b = b
	return e, nil
}

// checkEncodings turns checkEncoding on in a build without the race
// detector (a test's).
var (
	checkEncodings   atomic.Bool
	encodingsChecked atomic.Int64
)

// checkEncoding holds what the reused history gave to the whole encoding,
// in builds with the race detector (tests): every checkpoint write of every
// such test checks the cache.
func checkEncoding(cp *capsule.Checkpoint, b []byte) {
	encodingsChecked.Add(1)
	full, err := cp.AppendJSON(nil)
	if err != nil || !bytes.Equal(full, b) {
		panic(fmt.Sprintf("store: checkpoint %s encoded through the history cache as\n%s\nnot\n%s (%v)", cp.Key, b, full, err))
	}
}

// maxHistories bounds the histories kept: one per capsule in flight in
// this process. A capsule that stays parked, or that another sagad took
// on, leaves its entry behind until one is needed for room.
const (
	maxHistories = 1024
	maxFreeHist  = 64
)

// histories keeps, per capsule key, the encoding of the history this
// process last wrote for it (capsule.Checkpoint.AppendJSONReusing), which
// re-encodes nothing the checkpoint's history does not still hold equal.
// An entry in use is marked busy: two writes of one key at once (another
// worker's lost compare-and-set) do not share it, the second encodes in
// full. An ended capsule's entry is dropped at its last write and its
// memory kept for the next capsule.
type histories struct {
	mu   sync.Mutex
	m    map[string]*histEntry
	free []*histEntry
}

type histEntry struct {
	enc     capsule.HistoryEncoding
	subject string // of the key's writes, made once a capsule
	busy    bool
}

// take returns key's entry, marked busy, or a fresh one when it has none
// or its entry is in use.
func (hs *histories) take(key string) *histEntry {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if e := hs.m[key]; e != nil && !e.busy {
		e.busy = true
		return e
	} else if e != nil {
		// Not kept: the busy one stays key's.
		return &histEntry{subject: checkpointSubject(key)}
	}
	e := new(histEntry)
	if n := len(hs.free); n > 0 {
		e, hs.free = hs.free[n-1], hs.free[:n-1]
	}
	e.subject = checkpointSubject(key)
	if hs.m == nil {
		hs.m = make(map[string]*histEntry)
	}
	hs.makeRoom()
	e.busy = true
	hs.m[key] = e
	return e
}

// makeRoom drops an entry not in use when the map is full.
func (hs *histories) makeRoom() {
	if len(hs.m) < maxHistories {
		return
	}
	for k, e := range hs.m {
		if !e.busy {
			delete(hs.m, k)
			return
		}
	}
}

// done gives e back after a write; ended drops key's entry for good.
func (hs *histories) done(key string, e *histEntry, ended bool) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	e.busy = false
	if !ended || hs.m[key] != e {
		return
	}
	delete(hs.m, key)
	if len(hs.free) < maxFreeHist {
		e.enc.Reset()
		hs.free = append(hs.free, e)
	}
}

// checkpointSubject is the subject of key's checkpoint writes.
func checkpointSubject(key string) string { return "$KV." + CheckpointsBucket + "." + key }

// kvWrite is the message of a checkpoint write on subject at revision rev
// (its text) with the time to live ttl (0: none), from the pool: write
// makes, publishes and drops it within one call (see jspub.Msg).
func kvWrite(subject string, b []byte, rev string, ttl time.Duration) *jspub.Msg {
	p := jspub.GetMsg(subject, b)
	h := p.Headers()
	h.Set(jetstream.ExpectedLastSubjSeqHeader, rev)
	if ttl > 0 {
		h.Set(jetstream.MsgTTLHeader, ttl.String())
	}
	return p
}
