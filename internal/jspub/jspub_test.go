package jspub_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sagad/sagad/internal/cas"
	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/internal/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseAck(t *testing.T) {
	t.Parallel()
	seq, err := jspub.ParseAck([]byte(`{"stream":"KV_SAGA_CHECKPOINTS","seq":1234}`))
	require.NoError(t, err)
	require.EqualValues(t, 1234, seq)
	seq, err = jspub.ParseAck([]byte(`{"stream":"S","domain":"d","seq":7,"duplicate":true}`))
	require.NoError(t, err)
	require.EqualValues(t, 7, seq)
	_, err = jspub.ParseAck([]byte(`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"S","seq":0}`))
	var apiErr *jetstream.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, jetstream.JSErrCodeStreamWrongLastSequence, apiErr.ErrorCode)
	require.True(t, cas.Conflict(err))
	_, err = jspub.ParseAck([]byte(`{"stream":"S","seq":0}`))
	require.ErrorContains(t, err, "without a sequence")
	_, err = jspub.ParseAck([]byte(`not json`))
	require.Error(t, err)
}

// TestPublish checks the acknowledgements of a real server: sequences,
// an expected-sequence refusal, concurrent publishes, no stream.
func TestPublish(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	nc, js := natstest.Connect(t, srv)
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.FileStorage})
	require.NoError(t, err)

	seq, err := jspub.Publish(ctx, nc, &nats.Msg{Subject: "s.a", Data: []byte("1")})
	require.NoError(t, err)
	require.EqualValues(t, 1, seq)

	// A compare-and-set on the subject's last sequence: right, then stale.
	m := nats.NewMsg("s.a")
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "1")
	seq, err = jspub.Publish(ctx, nc, m)
	require.NoError(t, err)
	require.EqualValues(t, 2, seq)
	_, err = jspub.Publish(ctx, nc, m)
	require.True(t, cas.Conflict(err), "%v", err)

	// KV create: a new key in one request, a live key refused, a purged
	// key (its marker expiring) taken over.
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "B", Storage: jetstream.FileStorage, LimitMarkerTTL: time.Second})
	require.NoError(t, err)
	rev, err := jspub.KVCreate(ctx, nc, kv, "k", []byte("v1"))
	require.NoError(t, err)
	_, err = jspub.KVCreate(ctx, nc, kv, "k", []byte("v2"))
	require.ErrorIs(t, err, jetstream.ErrKeyExists)
	require.True(t, cas.Conflict(err))
	_, err = jspub.KVPurge(ctx, nc, kv, "k", rev+1, time.Second)
	require.True(t, cas.Conflict(err), "purge at a wrong revision: %v", err)
	marker, err := jspub.KVPurge(ctx, nc, kv, "k", rev, time.Second)
	require.NoError(t, err)
	require.Greater(t, marker, rev)
	_, err = kv.Get(ctx, "k")
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound)
	rev2, err := jspub.KVCreate(ctx, nc, kv, "k", []byte("v3"))
	require.NoError(t, err)
	e, err := kv.Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, "v3", string(e.Value()))
	require.Equal(t, rev2, e.Revision())

	// An update at the marker's revision, in one request; a stale one refused.
	marker, err = jspub.KVPurge(ctx, nc, kv, "k", rev2, time.Second)
	require.NoError(t, err)
	_, err = jspub.KVUpdate(ctx, nc, kv, "k", []byte("v4"), marker-1)
	require.True(t, cas.Conflict(err), "%v", err)
	rev3, err := jspub.KVUpdate(ctx, nc, kv, "k", []byte("v4"), marker)
	require.NoError(t, err)
	require.Equal(t, marker+1, rev3)

	// No stream takes the subject: no responders, after the retries.
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = jspub.Publish(short, nc, &nats.Msg{Subject: "nowhere", Data: []byte("x")})
	require.ErrorIs(t, err, nats.ErrNoResponders)
	require.ErrorContains(t, err, "publish nowhere")
}
