package jspub

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/internal/differential"
)

// kvOp is a KV update at rev or a purge at rev with a marker's ttl.
type kvOp struct {
	purge bool
	rev   uint64
	ttl   time.Duration
}

// bucketB is a bucket named B: all kvUpdateMsg and kvPurgeMsg ask of one.
type bucketB struct{ jetstream.KeyValue }

func (bucketB) Bucket() string { return "B" }

// pooledKVMsgsPair: the KV updates and purges Writes publishes in a pooled
// message (one after another: what the one before held must be gone) are
// the messages of their own kvUpdateMsg and kvPurgeMsg make.
var pooledKVMsgsPair = differential.Pair[kvOp, *nats.Msg]{
	Name: "PooledKVMsgs",
	Fast: func(op kvOp) (*nats.Msg, error) {
		p := GetMsg(kvSubject(bucketB{}, "k"), nil)
		if op.purge {
			kvPurgeHeaders(p.Headers(), op.rev, op.ttl)
		} else {
			kvUpdateHeaders(p.Headers(), op.rev)
		}
		m := &nats.Msg{Subject: p.Msg().Subject, Header: cloneHeader(p.Msg().Header)}
		p.Release()
		return m, nil
	},
	Reference: func(op kvOp) (*nats.Msg, error) {
		if op.purge {
			return kvPurgeMsg(bucketB{}, "k", op.rev, op.ttl), nil
		}
		return kvUpdateMsg(bucketB{}, "k", nil, op.rev), nil
	},
	Seeds: []kvOp{{}, {rev: 1}, {purge: true, rev: 7}, {purge: true, rev: 1 << 63, ttl: 90 * time.Second}, {purge: true, ttl: -time.Second}},
	Generate: func(r *rand.Rand) kvOp {
		return kvOp{purge: r.IntN(2) == 0, rev: r.Uint64() >> r.IntN(64), ttl: time.Duration(r.Int64N(1e12)) - time.Second}
	},
	Count: 2000,
	// The fuzzer's bytes: purge (the first byte's low bit), rev and ttl
	// (eight bytes each, big-endian).
	Decode: func(b []byte) (kvOp, bool) {
		if len(b) != 17 {
			return kvOp{}, false
		}
		return kvOp{purge: b[0]&1 == 1, rev: binary.BigEndian.Uint64(b[1:9]), ttl: time.Duration(binary.BigEndian.Uint64(b[9:17]))}, true
	},
	Encode: func(op kvOp) []byte {
		b := make([]byte, 17)
		if op.purge {
			b[0] = 1
		}
		binary.BigEndian.PutUint64(b[1:9], op.rev)
		binary.BigEndian.PutUint64(b[9:17], uint64(op.ttl))
		return b
	},
}

func FuzzPooledKVMsgs(f *testing.F) { differential.Fuzz(f, pooledKVMsgsPair) }
