package jspub_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/cas"
	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/internal/natstest"
)

func TestWriteCtx(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		parent time.Duration // 0: no deadline
		d      time.Duration
		want   time.Duration
	}{
		{"no deadline: d", 0, time.Second, time.Second},
		{"no deadline, no d: the default", 0, 0, jspub.DefaultTimeout},
		{"a phase's ten minutes: d", 10 * time.Minute, 5 * time.Second, 5 * time.Second},
		{"less left than d: the caller's", 200 * time.Millisecond, 5 * time.Second, 200 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.parent > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.parent)
				defer cancel()
			}
			start := time.Now()
			wctx, cancel := jspub.WriteCtx(ctx, tt.d)
			defer cancel()
			dl, ok := wctx.Deadline()
			require.True(t, ok)
			require.InDelta(t, tt.want.Seconds(), dl.Sub(start).Seconds(), 0.1)
		})
	}
}

// TestWritesDo: a write nothing answers fails after the write timeout, not
// after its caller's minute, and is reported; one its caller gave up on is
// not.
func TestWritesDo(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, srv)
	// A responder that never answers: the publish waits for its deadline.
	sub, err := nc.SubscribeSync("silent")
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	var mu sync.Mutex
	var seen []error
	w := &jspub.Writes{Timeout: 100 * time.Millisecond, Observe: func(_ string, err error) {
		mu.Lock()
		seen = append(seen, err)
		mu.Unlock()
	}}
	observed := func() []error {
		mu.Lock()
		defer mu.Unlock()
		return append([]error(nil), seen...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err = jspub.Write(ctx, w, func(ctx context.Context) (uint64, error) {
		return jspub.Publish(ctx, nc, &nats.Msg{Subject: "silent", Data: []byte("x")})
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 10*time.Second)
	require.Len(t, observed(), 1)
	require.ErrorIs(t, observed()[0], context.DeadlineExceeded)

	require.NoError(t, w.Do(ctx, func(context.Context) error { return nil }))
	require.Len(t, observed(), 2)
	require.NoError(t, observed()[1])

	// The caller's context ended: nothing to say about JetStream.
	gone, stop := context.WithCancel(context.Background())
	stop()
	err = w.Do(gone, func(ctx context.Context) error { return ctx.Err() })
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, observed(), 2)

	// A nil policy still bounds the write.
	var none *jspub.Writes
	err = none.Do(context.Background(), func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("no deadline")
		}
		return nil
	})
	require.NoError(t, err)
}

// BenchmarkWritesDo is what the policy adds to each write (a write of no
// cost under a phase's deadline, observed).
func BenchmarkWritesDo(b *testing.B) {
	w := &jspub.Writes{Timeout: 5 * time.Second, Observe: func(string, error) {}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	write := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		_ = w.Do(ctx, write)
	}
}

// TestWritesPublish: the hot path's write, without a context of its own,
// keeps Do's contract: bounded by the write timeout (or the caller's
// sooner deadline), failing with context.DeadlineExceeded, reported unless
// the caller gave up, never sent once the caller has; refusals and
// sequences as Publish.
func TestWritesPublish(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc, js := natstest.Connect(t, srv)
	sub, err := nc.SubscribeSync("silent")
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	var mu sync.Mutex
	var seen []error
	w := &jspub.Writes{Timeout: 100 * time.Millisecond, Observe: func(_ string, err error) {
		mu.Lock()
		seen = append(seen, err)
		mu.Unlock()
	}}
	observed := func() []error {
		mu.Lock()
		defer mu.Unlock()
		return append([]error(nil), seen...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	start := time.Now()
	_, err = w.Publish(ctx, nc, &nats.Msg{Subject: "silent", Data: []byte("x")})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "publish silent")
	require.Less(t, time.Since(start), 10*time.Second)
	require.Len(t, observed(), 1)
	require.ErrorIs(t, observed()[0], context.DeadlineExceeded)

	// The caller's deadline, sooner than the write timeout, bounds it.
	slow := &jspub.Writes{Timeout: time.Hour}
	short, stopShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer stopShort()
	_, err = slow.Publish(short, nc, &nats.Msg{Subject: "silent", Data: []byte("x")})
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// A stream's sequence, and a refused compare-and-set (a success for
	// the observer: the server answered).
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "W", Subjects: []string{"w.>"}, Storage: jetstream.FileStorage})
	require.NoError(t, err)
	seq, err := w.Publish(ctx, nc, &nats.Msg{Subject: "w.a", Data: []byte("1")})
	require.NoError(t, err)
	require.EqualValues(t, 1, seq)
	m := nats.NewMsg("w.a")
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "7")
	_, err = w.Publish(ctx, nc, m)
	require.True(t, cas.Conflict(err), "%v", err)
	require.Len(t, observed(), 3)
	require.NoError(t, observed()[1])

	// The caller gave up: not sent, not reported.
	gone, stop := context.WithCancel(context.Background())
	stop()
	_, err = w.Publish(gone, nc, &nats.Msg{Subject: "w.a", Data: []byte("2")})
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, observed(), 3)
	info, err := js.Stream(ctx, "W")
	require.NoError(t, err)
	_, err = info.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, info.CachedInfo().State.Msgs)

	// A nil policy bounds it by the default.
	var none *jspub.Writes
	seq, err = none.Publish(ctx, nc, &nats.Msg{Subject: "w.b", Data: []byte("3")})
	require.NoError(t, err)
	require.EqualValues(t, 2, seq)
}

// BenchmarkWritesPublish is a publish through the policy against one
// through Do with jspub.Publish (a context per write), both to a stream.
func BenchmarkWritesPublish(b *testing.B) {
	srv := natstest.RunServer(b)
	nc, js := natstest.Connect(b, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "B", Subjects: []string{"b.>"}, Storage: jetstream.MemoryStorage})
	require.NoError(b, err)
	w := &jspub.Writes{Timeout: 5 * time.Second, Observe: func(string, error) {}}
	m := &nats.Msg{Subject: "b.x", Data: []byte("x")}
	b.Run("context per write", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := jspub.Write(ctx, w, func(ctx context.Context) (uint64, error) { return jspub.Publish(ctx, nc, m) }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Writes.Publish", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := w.Publish(ctx, nc, m); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A phase's write: its context has no deadline of its own.
	b.Run("Writes.Publish, no deadline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := w.Publish(context.Background(), nc, m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestTargetOf(t *testing.T) {
	t.Parallel()
	for subject, want := range map[string]string{
		"$KV.SAGA_CHECKPOINTS.k.1": "SAGA_CHECKPOINTS",
		"$O.SAGA_ARTIFACTS.C.x":    "SAGA_ARTIFACTS",
		"$KV.B":                    "",
		"saga.phase.3":             "",
	} {
		require.Equal(t, want, jspub.TargetOf(subject), subject)
	}
	require.Nil(t, (*jspub.Writes)(nil).On("X"))
	w := &jspub.Writes{Timeout: time.Second}
	require.Equal(t, "X", w.On("X").Target)
	require.Empty(t, w.Target, "On copies")
}

// TestWritesKVCreate: Writes.KVCreate keeps KVCreate's answers (a new key
// in one request, a live key refused, a key over a purge marker taken
// over), under a context without a deadline of its own, and every write is
// reported to Observe under the bucket's name.
func TestWritesKVCreate(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc, js := natstest.Connect(t, srv)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "KC", Storage: jetstream.FileStorage, LimitMarkerTTL: time.Second})
	require.NoError(t, err)
	var mu sync.Mutex
	var seen []string
	w := &jspub.Writes{Timeout: 5 * time.Second, Observe: func(target string, err error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, target)
	}}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }

	rev, err := w.KVCreate(ctx, nc, kv, "k", []byte("v1"))
	require.NoError(t, err)
	require.Equal(t, 1, count(), "a key never written: one request")
	_, err = w.KVCreate(ctx, nc, kv, "k", []byte("v2"))
	require.ErrorIs(t, err, jetstream.ErrKeyExists)
	require.True(t, cas.Conflict(err))
	_, err = w.KVPurge(ctx, nc, kv, "k", rev, time.Second)
	require.NoError(t, err)
	rev2, err := w.KVCreate(ctx, nc, kv, "k", []byte("v3"))
	require.NoError(t, err)
	e, err := kv.Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, "v3", string(e.Value()))
	require.Equal(t, rev2, e.Revision())
	mu.Lock()
	defer mu.Unlock()
	for _, target := range seen {
		require.Equal(t, "KC", target)
	}
}

// TestWritesPublishNoResponders: a subject no stream takes is tried again
// within the write's time: past the retries it is no responders, and a
// write timeout shorter than the retries' pauses ends it as a deadline.
func TestWritesPublishNoResponders(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, srv)
	ctx := context.Background()
	start := time.Now()
	_, err := (&jspub.Writes{Timeout: 5 * time.Second}).Publish(ctx, nc, &nats.Msg{Subject: "nostream.a", Data: []byte("x")})
	require.ErrorIs(t, err, nats.ErrNoResponders)
	took := time.Since(start)
	require.GreaterOrEqual(t, took, 500*time.Millisecond, "two pauses between three tries")
	require.Less(t, took, 5*time.Second)

	start = time.Now()
	_, err = (&jspub.Writes{Timeout: 300 * time.Millisecond}).Publish(ctx, nc, &nats.Msg{Subject: "nostream.a", Data: []byte("x")})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	took = time.Since(start)
	require.GreaterOrEqual(t, took, 300*time.Millisecond)
	require.Less(t, took, 2*time.Second)
}
