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

// encoded is a checkpoint's encoding in a pooled buffer.
type encoded struct {
	b   []byte
	buf *[]byte
}

// release returns the buffer.
func (e encoded) release() { *e.buf = e.b[:0]; encodeBufs.Put(e.buf) }

// encode encodes cp into a pooled buffer, its history's earlier
// transitions copied from h when h is not nil (see Cache.history).
//
// The kept encoding lives in the cache's entry for the capsule: keeping
// it in a map of its own was tried, and finding it there cost more than
// re-encoding the transitions (a transition encodes in about 50 ns).
func encode(cp *capsule.Checkpoint, h *keptHistory) (encoded, error) {
	e := encoded{buf: encodeBufs.Get().(*[]byte)}
	var b []byte
	var err error
	if h != nil {
		b, err = cp.AppendJSONKeeping((*e.buf)[:0], &h.enc)
	} else {
		b, err = cp.AppendJSON((*e.buf)[:0])
	}
	if err == nil && h != nil && checkKept.Load() {
		checkEncoding(cp, b)
	}
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

// kvWrite is the message of a checkpoint write of key at revision rev
// (its text) with the time to live ttl (0: none), from the pool: write
// makes, publishes and drops it within one call (see jspub.Msg).
func kvWrite(key string, b []byte, rev string, ttl time.Duration) *jspub.Msg {
	p := jspub.GetMsg("$KV."+CheckpointsBucket+"."+key, b)
	h := p.Headers()
	h.Set(jetstream.ExpectedLastSubjSeqHeader, rev)
	if ttl > 0 {
		h.Set(jetstream.MsgTTLHeader, ttl.String())
	}
	return p
}
