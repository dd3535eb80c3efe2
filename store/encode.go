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

// encoded is a checkpoint's encoding, in a pooled buffer (buf) or in the
// buffer of the kept history it was encoded with (buf nil).
type encoded struct {
	b   []byte
	buf *[]byte
}

// release returns the buffer to the pool; a kept history's stays with it.
func (e encoded) release() {
	if e.buf != nil {
		*e.buf = e.b[:0]
		encodeBufs.Put(e.buf)
	}
}

// encode encodes cp; with a kept history h (see Cache.history), into h's
// buffer, its history's earlier transitions copied from h, else into a
// pooled buffer. h's buffer is the capsule's from one write to the next:
// a pool's Get and Put cost more than the lookup that finds h.
//
// The kept encoding lives in the cache's entry for the capsule: keeping
// it in a map of its own was tried, and finding it there cost more than
// re-encoding the transitions (a transition encodes in about 50 ns).
func encode(cp *capsule.Checkpoint, h *keptHistory) (encoded, error) {
	if h != nil {
		b, err := cp.AppendJSONKeeping(h.buf[:0], &h.enc)
		if err != nil {
			return encoded{}, err
		}
		h.buf = b
		if checkKept.Load() {
			checkEncoding(cp, b)
		}
		return encoded{b: b}, nil
	}
	e := encoded{buf: encodeBufs.Get().(*[]byte)}
	b, err := cp.AppendJSON((*e.buf)[:0])
	if err != nil {
		encodeBufs.Put(e.buf)
		return encoded{}, err
	}
	e.b = b
	return e, nil
}

// checkKept makes encode hold every encoding made with a kept history to a
// full one: the package's tests, and every test run with the race
// detector, set it. keptChecked counts the encodings checked.
var (
	checkKept   atomic.Bool
	keptChecked atomic.Int64
)

// checkEncoding panics unless b is cp's full encoding.
func checkEncoding(cp *capsule.Checkpoint, b []byte) {
	keptChecked.Add(1)
	full, err := cp.AppendJSON(nil)
	if err != nil || !bytes.Equal(full, b) {
		panic(fmt.Sprintf("store: checkpoint %s encoded with its kept history as\n%s\nnot\n%s (%v)", cp.Key, b, full, err))
	}
}

// checkpointPrefix begins the subject of every checkpoint write.
const checkpointPrefix = "$KV." + CheckpointsBucket + "."

// checkpointSubject is the subject of the checkpoint of key.
func checkpointSubject(key string) string { return checkpointPrefix + key }

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
