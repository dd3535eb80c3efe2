package store

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/internal/natstest"
)

// writeCounter counts the writes an artifact store makes, per target, as
// package health is told them.
type writeCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *writeCounter) observe(target string, _ error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[target]++
}

func (c *writeCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

// artifactFixture is an embedded server with sagad's topology and an
// artifact store over it whose writes are counted.
type artifactFixture struct {
	js     jetstream.JetStream
	st     *stores
	s      *Artifacts
	writes *writeCounter
}

func newArtifactFixture(t *testing.T) *artifactFixture {
	t.Helper()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := ensureTopology(ctx, js, Topology{}.withDefaults())
	require.NoError(t, err)
	f := &artifactFixture{js: js, st: st, writes: &writeCounter{n: map[string]int{}}}
	f.s = newArtifactStore(st.artifacts, st.artifactRecords, js)
	f.s.setWrites(&jspub.Writes{Observe: f.writes.observe})
	return f
}

// fresh is a store over the same buckets with no in-process copies: its
// reads go to JetStream.
func (f *artifactFixture) fresh() *Artifacts {
	return newArtifactStore(f.st.artifacts, f.st.artifactRecords, f.js)
}

// msgs is how many messages stream holds.
func (f *artifactFixture) msgs(t *testing.T, stream string) uint64 {
	t.Helper()
	s, err := f.js.Stream(context.Background(), stream)
	require.NoError(t, err)
	info, err := s.Info(context.Background())
	require.NoError(t, err)
	return info.State.Msgs
}

// sizedArtifact is an artifact of cycle whose record (appendArtifact's
// bytes, as Put writes them) is exactly n bytes.
func sizedArtifact(t *testing.T, cycle, n int) capsule.Artifact {
	t.Helper()
	a := capsule.Artifact{
		SchemaVersion: "1.0", CapsuleID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", ProducerAgentID: "agent", Cycle: cycle,
		MediaType: "application/json", CreatedAt: time.Date(2026, 11, 29, 1, 2, 3, 0, time.UTC), Content: []byte(`""`),
	}
	a.Ref = ArtifactRef(a.CapsuleID, a.Cycle)
	b, err := appendArtifact(nil, &a)
	require.NoError(t, err)
	require.LessOrEqual(t, len(b), n)
	a.Content = []byte(`"` + strings.Repeat("x", n-len(b)) + `"`)
	b, err = appendArtifact(nil, &a)
	require.NoError(t, err)
	require.Len(t, b, n)
	return a
}

// TestArtifactRecordForms: a record that fits one message is one request,
// a put into SAGA_ARTIFACT_RECORDS; one byte more and it is an object of
// SAGA_ARTIFACTS, as every record was before (chunks, then metadata). A
// store with no in-process copies reads both, and Lookup and the resolver
// find both.
func TestArtifactRecordForms(t *testing.T) {
	t.Parallel()
	f := newArtifactFixture(t)
	ctx := context.Background()
	for _, tt := range []struct {
		name    string
		size    int
		records map[string]int
	}{
		{"tiny", 400, map[string]int{ArtifactRecordsBucket: 1}},
		{"largest inline", maxInlineRecord, map[string]int{ArtifactRecordsBucket: 1}},
		{"one byte more", maxInlineRecord + 1, map[string]int{ArtifactsBucket: 3}}, // two chunks, the metadata
		{"large", 3*maxChunk + 7, map[string]int{ArtifactsBucket: 5}},
	} {
		a := sizedArtifact(t, tt.size, tt.size)
		ref, err := f.s.Put(ctx, a)
		require.NoError(t, err, tt.name)
		require.Equal(t, tt.records, f.writes.take(), "%s: the writes a put of %d bytes makes", tt.name, tt.size)
		_, objErr := f.st.artifacts.GetInfo(ctx, strings.TrimPrefix(ref, "artifact:"))
		_, kvErr := f.st.artifactRecords.Get(ctx, strings.TrimPrefix(ref, "artifact:"))
		inline := tt.records[ArtifactRecordsBucket] > 0
		require.Equal(t, inline, kvErr == nil, "%s: %v", tt.name, kvErr)
		require.Equal(t, !inline, objErr == nil, "%s: %v", tt.name, objErr)

		r := f.fresh()
		got, err := r.Get(ctx, ref)
		require.NoError(t, err, tt.name)
		want, err := json.Marshal(a)
		require.NoError(t, err)
		gotJSON, err := json.Marshal(got)
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(gotJSON), tt.name)
		_, found, err := r.Lookup(ctx, a.CapsuleID, a.Cycle)
		require.NoError(t, err)
		require.True(t, found, tt.name)
		ok, err := r.exists(ctx, ref)
		require.NoError(t, err)
		require.True(t, ok, tt.name)
	}
	require.Equal(t, uint64(2), f.msgs(t, "KV_"+ArtifactRecordsBucket), "the two inline records")
}

// TestArtifactRedeliveredPut: a put made again (a redelivered EXECUTION, a
// completion ingested twice) writes the same bytes under the same key; the
// bucket keeps one entry (history 1) and it reads back as put.
func TestArtifactRedeliveredPut(t *testing.T) {
	t.Parallel()
	f := newArtifactFixture(t)
	ctx := context.Background()
	a := sizedArtifact(t, 1, 1000)
	for range 3 {
		_, err := f.s.Put(ctx, a)
		require.NoError(t, err)
	}
	require.Equal(t, map[string]int{ArtifactRecordsBucket: 3}, f.writes.take())
	require.Equal(t, uint64(1), f.msgs(t, "KV_"+ArtifactRecordsBucket), "one entry")
	require.Zero(t, f.msgs(t, "OBJ_"+ArtifactsBucket))
	got, err := f.fresh().Get(ctx, a.Ref)
	require.NoError(t, err)
	require.Equal(t, string(a.Content), string(got.Content))
}

// TestArtifactWrittenByOlderSagad: a small record an older sagad wrote (an
// object, through the object store client) is still read, looked up and
// resolved; a ref stored nowhere is gone, as before.
func TestArtifactWrittenByOlderSagad(t *testing.T) {
	t.Parallel()
	f := newArtifactFixture(t)
	ctx := context.Background()
	a := sizedArtifact(t, 2, 500)
	b, err := json.Marshal(a)
	require.NoError(t, err)
	_, err = f.st.artifacts.PutBytes(ctx, strings.TrimPrefix(a.Ref, "artifact:"), b)
	require.NoError(t, err)

	r := f.fresh()
	got, err := r.Get(ctx, a.Ref)
	require.NoError(t, err)
	require.Equal(t, string(a.Content), string(got.Content))
	raw, err := r.Bytes(ctx, a.Ref)
	require.NoError(t, err)
	require.Equal(t, string(b), string(raw))
	_, found, err := r.Lookup(ctx, a.CapsuleID, a.Cycle)
	require.NoError(t, err)
	require.True(t, found)

	missing := ArtifactRef(a.CapsuleID, 9)
	_, err = r.Get(ctx, missing)
	require.ErrorIs(t, err, capsule.ErrArtifactGone)
	require.ErrorIs(t, err, jetstream.ErrObjectNotFound)
	_, found, err = r.Lookup(ctx, a.CapsuleID, 9)
	require.NoError(t, err)
	require.False(t, found)
	ok, err := r.exists(ctx, missing)
	require.NoError(t, err)
	require.False(t, ok)
}

// TestArtifactsOverOlderTopology: a store Opened over a topology an older
// sagad made (no records bucket) writes and reads every record as an
// object, as that sagad does.
func TestArtifactsOverOlderTopology(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := Ensure(ctx, js, Topology{})
	require.NoError(t, err)
	require.NoError(t, js.DeleteKeyValue(ctx, ArtifactRecordsBucket))
	s, err := Open(ctx, js)
	require.NoError(t, err)
	a := sizedArtifact(t, 1, 400)
	ref, err := s.Artifacts.Put(ctx, a)
	require.NoError(t, err)
	obj, err := js.ObjectStore(ctx, ArtifactsBucket)
	require.NoError(t, err)
	_, err = obj.GetInfo(ctx, strings.TrimPrefix(ref, "artifact:"))
	require.NoError(t, err, "an object")
	reopened, err := Open(ctx, js)
	require.NoError(t, err)
	got, err := reopened.Artifacts.Get(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, string(a.Content), string(got.Content))
}

// TestDecodeArtifact: a stored record is read only under its own ref.
func TestDecodeArtifact(t *testing.T) {
	t.Parallel()
	a := sizedArtifact(t, 1, 400)
	b, err := appendArtifact(nil, &a)
	require.NoError(t, err)
	got, err := decodeArtifact(a.Ref, b)
	require.NoError(t, err)
	require.Equal(t, a.Ref, got.Ref)
	for _, tt := range []struct {
		name string
		ref  string
		b    []byte
		want error
	}{
		{"another ref", ArtifactRef(a.CapsuleID, 2), b, errArtifactNamesOther},
		{"no ref", a.Ref, []byte(`{"capsule_id":"x"}`), errArtifactNamesOther},
		{"not JSON", a.Ref, []byte(`{`), nil},
		{"empty", a.Ref, nil, nil},
	} {
		_, err := decodeArtifact(tt.ref, tt.b)
		require.Error(t, err, tt.name)
		if tt.want != nil {
			require.ErrorIs(t, err, tt.want, tt.name)
		}
	}
}

// FuzzDecodeArtifact: any bytes read from either form decode to an error
// or to a record of the ref asked for, without panicking, and a record it
// takes is written back by Put's encoder as encoding/json would.
func FuzzDecodeArtifact(f *testing.F) {
	const ref = "artifact:0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/1"
	f.Add([]byte(`{"schema_version":"1.0","ref":"` + ref + `","capsule_id":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","cycle":1,"content":{"a":1}}`))
	f.Add([]byte(`{"ref":"artifact:other/1"}`))
	f.Add([]byte(`{"ref":"` + ref + `","usage":{"dollars":1e400}}`))
	f.Add([]byte(`{"ref":"` + ref + `","created_at":"not a time"}`))
	f.Add([]byte(`null`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeArtifact(ref, b)
		if err != nil {
			if errors.Is(err, errArtifactNamesOther) {
				require.NotEqual(t, ref, a.Ref)
			}
			return
		}
		require.Equal(t, ref, a.Ref)
		got, gerr := appendArtifact(nil, &a)
		want, werr := json.Marshal(a)
		require.Equal(t, werr == nil, gerr == nil, "%v / %v", werr, gerr)
		if werr == nil {
			require.Equal(t, string(want), string(got))
		}
	})
}

// TestArtifactRecordMessages reads back the message a record's put wrote:
// on the key's subject, without headers, json.Marshal's bytes.
func TestArtifactRecordMessages(t *testing.T) {
	t.Parallel()
	f := newArtifactFixture(t)
	ctx := context.Background()
	a := sizedArtifact(t, 3, 700)
	_, err := f.s.Put(ctx, a)
	require.NoError(t, err)
	want, err := json.Marshal(a)
	require.NoError(t, err)
	stream, err := f.js.Stream(ctx, "KV_"+ArtifactRecordsBucket)
	require.NoError(t, err)
	m, err := stream.GetMsg(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, "$KV."+ArtifactRecordsBucket+"."+a.CapsuleID+"/3", m.Subject)
	for _, k := range []string{"Nats-Sequence", "Nats-Stream", "Nats-Subject", "Nats-Time-Stamp", "Nats-Num-Pending", "Nats-Last-Sequence"} {
		delete(m.Header, k) // the server's, on a direct get
	}
	require.Empty(t, m.Header)
	require.Equal(t, string(want), string(m.Data))
}

// TestArtifactsUnderSmallMaxPayload: on a server whose max_payload is
// under 128 KiB, a record that does not fit one message with room to spare
// is an object, chunked to fit, and reads back.
func TestArtifactsUnderSmallMaxPayload(t *testing.T) {
	t.Parallel()
	const maxPayload = 64 << 10
	_, js := natstest.Connect(t, natstest.RunServerWith(t, func(o *server.Options) { o.MaxPayload = maxPayload }))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := ensureTopology(ctx, js, Topology{}.withDefaults())
	require.NoError(t, err)
	w := newArtifactStore(st.artifacts, st.artifactRecords, js)
	for _, tt := range []struct {
		size   int
		record bool
	}{{maxPayload - recordHeadroom, true}, {maxPayload - recordHeadroom + 1, false}, {100 << 10, false}} {
		a := sizedArtifact(t, tt.size, tt.size)
		ref, err := w.Put(ctx, a)
		require.NoError(t, err, "%d bytes", tt.size)
		_, kvErr := st.artifactRecords.Get(ctx, strings.TrimPrefix(ref, "artifact:"))
		require.Equal(t, tt.record, kvErr == nil, "%d bytes: %v", tt.size, kvErr)
		got, err := newArtifactStore(st.artifacts, st.artifactRecords, js).Get(ctx, ref)
		require.NoError(t, err, "%d bytes", tt.size)
		require.Equal(t, string(a.Content), string(got.Content))
	}
}
