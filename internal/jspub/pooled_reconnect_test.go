package jspub_test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/internal/natstest"
)

// bucketNamed is a KV bucket of that name: all a pooled KV write asks of
// one (its subject).
type bucketNamed struct {
	jetstream.KeyValue
	name string
}

func (b bucketNamed) Bucket() string { return b.name }

// TestPooledKVWritesQueuedPastTheirTimeout: pooled KV writes that time out
// while their connection is down stay queued in the connection's reconnect
// buffer, and the pooled messages serve the next writes at once (other
// keys, bodies, revisions, a TTL set or not). What the server gets once
// the connection is back is each write as it was made: nats.go copies a
// request's bytes when it sends it, so releasing the message on a timeout
// is safe.
func TestPooledKVWritesQueuedPastTheirTimeout(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	port := srv.Addr().(*net.TCPAddr).Port
	nc, err := nats.Connect(srv.ClientURL(), nats.ReconnectWait(20*time.Millisecond), nats.MaxReconnects(-1))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	var (
		mu  sync.Mutex
		got = map[string]*nats.Msg{}
	)
	_, err = nc.Subscribe("$KV.B.>", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		got[m.Subject] = m
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	srv.Shutdown()
	srv.WaitForShutdown()
	natstest.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool { return nc.Status() == nats.RECONNECTING },
		"the connection sees its server gone")
	w := &jspub.Writes{Timeout: 50 * time.Millisecond}
	kv := bucketNamed{name: "B"}
	ctx := context.Background()
	const n = 4
	for i := range n {
		_, err := w.KVUpdate(ctx, nc, kv, "u"+strconv.Itoa(i), []byte("value-"+strconv.Itoa(i)), uint64(i+1))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		ttl := time.Duration(i%2) * 90 * time.Second
		_, err = w.KVPurge(ctx, nc, kv, "p"+strconv.Itoa(i), uint64(100+i), ttl)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}

	natstest.RunServerWith(t, func(o *server.Options) { o.Port = port })
	natstest.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 2*n
	}, "the queued writes arrive once the connection is back")
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		u := got["$KV.B.u"+strconv.Itoa(i)]
		require.NotNil(t, u, i)
		require.Equal(t, "value-"+strconv.Itoa(i), string(u.Data))
		require.Equal(t, nats.Header{jetstream.ExpectedLastSubjSeqHeader: {strconv.Itoa(i + 1)}}, u.Header)
		p := got["$KV.B.p"+strconv.Itoa(i)]
		require.NotNil(t, p, i)
		require.Empty(t, p.Data)
		want := nats.Header{"KV-Operation": {"PURGE"}, jetstream.MsgRollup: {jetstream.MsgRollupSubject},
			jetstream.ExpectedLastSubjSeqHeader: {strconv.Itoa(100 + i)}}
		if i%2 == 1 {
			want[jetstream.MsgTTLHeader] = []string{(90 * time.Second).String()}
		}
		require.Equal(t, want, p.Header)
	}
}
