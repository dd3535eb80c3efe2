package jspub

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/differential"
	"github.com/sagad/sagad/internal/natstest"
)

// headerOps is a sequence of Sets on headers made for size.
type headerOps struct {
	size int
	sets [][2]string
}

// apply runs ops on h, then Adds "added" to each key in turn, and returns
// the headers after the Sets and after each Add.
func (ops headerOps) apply(set func(k, v string), m func() nats.Header) []nats.Header {
	for _, kv := range ops.sets {
		set(kv[0], kv[1])
	}
	out := []nats.Header{cloneHeader(m())}
	keys := slices.Sorted(maps.Keys(m()))
	for _, k := range keys {
		m().Add(k, "added")
		out = append(out, cloneHeader(m()))
	}
	return out
}

func cloneHeader(h nats.Header) nats.Header {
	c := make(nats.Header, len(h))
	for k, v := range h {
		c[k] = slices.Clone(v)
	}
	return c
}

// headersPair: Headers holds what nats.Header.Set would, whatever the
// order, repeats and count against the size given, and a later Add to one
// key leaves the others' values alone (they share one array).
var headersPair = differential.Pair[headerOps, []nats.Header]{
	Name: "HeadersAsSet",
	Fast: func(ops headerOps) ([]nats.Header, error) {
		h := NewHeaders(ops.size)
		return ops.apply(h.Set, h.Map), nil
	},
	Reference: func(ops headerOps) ([]nats.Header, error) {
		h := nats.Header{}
		return ops.apply(h.Set, func() nats.Header { return h }), nil
	},
	Seeds: []headerOps{{}, {size: 2, sets: [][2]string{{"A", "1"}, {"a", "2"}, {"A", "3"}}}},
	Generate: func(r *rand.Rand) headerOps {
		keys := []string{"A", "b", "Nats-Expected-Last-Subject-Sequence", "Saga-Key", "saga-key", "Nats-TTL"}
		ops := headerOps{size: r.IntN(5)}
		for n := r.IntN(8); n > 0; n-- {
			ops.sets = append(ops.sets, [2]string{keys[r.IntN(len(keys))], strconv.Itoa(r.IntN(1000))})
		}
		return ops
	},
	Count: 2000,
}

func TestDifferential(t *testing.T) {
	t.Parallel()
	differential.RunAll(t, differential.Registry{directEntryPair, headersPair, pooledKVMsgsPair})
}

// TestKVMsgsAsSet: the KV update and purge messages carry the headers the
// nats.Header.Set version made, and the server stores them as sent.
func TestKVMsgsAsSet(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc, js := natstest.Connect(t, srv)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "B", Storage: jetstream.FileStorage, LimitMarkerTTL: time.Second})
	require.NoError(t, err)

	want := nats.NewMsg("$KV.B.k")
	want.Data = []byte("v")
	want.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	m := kvUpdateMsg(kv, "k", []byte("v"), 0)
	require.Equal(t, want, m)
	rev, err := Publish(ctx, nc, m)
	require.NoError(t, err)
	requireStored(t, js, rev, want)

	for _, ttl := range []time.Duration{0, 90 * time.Second} {
		want = nats.NewMsg("$KV.B.k")
		want.Header.Set("KV-Operation", "PURGE")
		want.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		want.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
		if ttl > 0 {
			want.Header.Set(jetstream.MsgTTLHeader, ttl.String())
		}
		m = kvPurgeMsg(kv, "k", rev, ttl)
		require.Equal(t, want.Subject, m.Subject)
		require.Empty(t, m.Data)
		require.Equal(t, want.Header, m.Header)
		rev, err = Publish(ctx, nc, m)
		require.NoError(t, err)
		requireStored(t, js, rev, want)
	}
}

// TestPooledKVMsgsAsSet: the KV updates and purges Writes sends in pooled
// messages are stored with the headers of kvUpdateMsg and kvPurgeMsg, one
// pooled message after another.
func TestPooledKVMsgsAsSet(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc, js := natstest.Connect(t, srv)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "B", Storage: jetstream.FileStorage, LimitMarkerTTL: time.Second})
	require.NoError(t, err)
	var w *Writes
	for i := range 6 {
		key := "k" + strconv.Itoa(i)
		want := kvUpdateMsg(kv, key, []byte("v"), 0)
		write := w.KVUpdate
		if i%2 == 1 {
			write = func(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, key string, value []byte, _ uint64) (uint64, error) {
				return w.KVCreate(ctx, nc, kv, key, value)
			}
		}
		rev, err := write(ctx, nc, kv, key, []byte("v"), 0)
		require.NoError(t, err)
		requireStored(t, js, rev, want)
		want = kvUpdateMsg(kv, key, []byte("w"), rev)
		rev, err = w.KVUpdate(ctx, nc, kv, key, []byte("w"), rev)
		require.NoError(t, err)
		requireStored(t, js, rev, want)
		ttl := time.Duration(i%2) * 90 * time.Second
		want = kvPurgeMsg(kv, key, rev, ttl)
		rev, err = w.KVPurge(ctx, nc, kv, key, rev, ttl)
		require.NoError(t, err)
		requireStored(t, js, rev, want)
	}
}

// requireStored: the stream's message seq holds want's headers.
func requireStored(t *testing.T, js jetstream.JetStream, seq uint64, want *nats.Msg) {
	t.Helper()
	s, err := js.Stream(context.Background(), "KV_B")
	require.NoError(t, err)
	got, err := s.GetMsg(context.Background(), seq)
	require.NoError(t, err)
	require.Equal(t, want.Subject, got.Subject)
	for k, v := range want.Header {
		require.Equal(t, v, got.Header.Values(k), k)
	}
}

// BenchmarkHeaders: a message of five headers (a phase message's), made
// with nats.Header.Set and with Headers.
func BenchmarkHeaders(b *testing.B) {
	keys := []string{"Saga-Key", "Saga-Capsule-Id", "Saga-Trace-Id", "Saga-Phase", "Saga-Cycle"}
	b.Run("nats.Header.Set", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m := nats.NewMsg("s")
			for _, k := range keys {
				m.Header.Set(k, k)
			}
			sink = m
		}
	})
	b.Run("Headers", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			h := NewHeaders(len(keys))
			for _, k := range keys {
				h.Set(k, k)
			}
			sink = NewMsg("s", nil, h)
		}
	})
}

// sink keeps the benchmarks' messages on the heap, as a publish's are.
var sink *nats.Msg

// TestMsgReleased: a pooled message comes back empty, whatever the one
// before held (more headers than its array included), and holds what a
// nats.Header.Set message would.
func TestMsgReleased(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(11, 12))
	for range 500 {
		p := GetMsg("s."+strconv.Itoa(r.IntN(9)), []byte("x"))
		require.Empty(t, p.Msg().Header)
		want := nats.NewMsg(p.Msg().Subject)
		want.Data = []byte("x")
		for n := r.IntN(2 * msgVals); n > 0; n-- {
			k, v := "K"+strconv.Itoa(r.IntN(3*msgVals)), strconv.Itoa(r.IntN(100))
			p.Headers().Set(k, v)
			want.Header.Set(k, v)
		}
		require.Equal(t, want, p.Msg())
		p.Release()
		require.Empty(t, p.Msg().Header)
		require.Nil(t, p.Msg().Data)
	}
}

// BenchmarkKVMsgs: a KV update (a lock's take) and a purge (its release)
// as they were made (kvUpdateMsg, kvPurgeMsg) and as Writes makes them now
// (a pooled message).
func BenchmarkKVMsgs(b *testing.B) {
	const subject = "$KV.SAGA_LOCKS.repo_sagad_capsule"
	b.Run("update/own", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			h := NewHeaders(1)
			kvUpdateHeaders(&h, 123456)
			sink = NewMsg(subject, nil, h)
		}
	})
	b.Run("update/pooled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p := GetMsg(subject, nil)
			kvUpdateHeaders(p.Headers(), 123456)
			sink = p.Msg()
			p.Release()
		}
	})
	b.Run("purge/own", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			h := NewHeaders(4)
			kvPurgeHeaders(&h, 123456, time.Minute)
			sink = NewMsg(subject, nil, h)
		}
	})
	b.Run("purge/pooled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p := GetMsg(subject, nil)
			kvPurgeHeaders(p.Headers(), 123456, time.Minute)
			sink = p.Msg()
			p.Release()
		}
	})
}
