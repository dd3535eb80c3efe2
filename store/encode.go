package store

import (
	"sync"
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

// encode encodes cp into a pooled buffer.
//
// The whole history is encoded at every write. Keeping each capsule's
// encoded history between its writes (the earlier transitions compared
// field for field, only the new ones encoded) was tried: a transition
// encodes in about 50 ns, and finding the kept encoding in a map of the
// capsules in flight cost more than that in a busy process (256 capsules
// taking turns: 460 ns a write encoding everything, 580–1,000 with the
// kept histories). Keeping it in the capsule's cache entry instead, found
// by a lookup in the map the phases search anyway, with the members up to
// created_at, the buffer and the subject, halved a write in a
// micro-benchmark (BenchmarkKeptHistory, 1,024 capsules: 765 to 470 ns)
// but not in the whole process: by a capsule's next write its kept bytes
// are out of the processor's caches, and copying them (and writing into
// the capsule's own buffer rather than a pooled one still in cache) cost
// more than encoding from the checkpoint the machine has just touched
// (sagabench, 33,000 capsules: the encoding 1.4 % of the process before,
// 1.9 % with it).
func encode(cp *capsule.Checkpoint) (encoded, error) {
	e := encoded{buf: encodeBufs.Get().(*[]byte)}
	b, err := cp.AppendJSON((*e.buf)[:0])
	if err != nil {
		encodeBufs.Put(e.buf)
		return encoded{}, err
	}
	e.b = b
	return e, nil
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
