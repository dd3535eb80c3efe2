package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/differential"
	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/internal/natstest"
)

// artifactJSONPair holds Put's encoding of an artifact to json.Marshal:
// the same bytes after what the buffer held, or the same error; and a
// plain artifact fits the room artifactLen makes for it.
var artifactJSONPair = differential.Pair[*capsule.Artifact, string]{
	Name: "ArtifactJSON",
	Fast: func(a *capsule.Artifact) (string, error) {
		got, err := appendArtifact([]byte("prefix"), a)
		if err != nil {
			return "", err
		}
		if n := len(got) - len("prefix"); plainArtifact(a) && n > artifactLen(a) {
			return "", fmt.Errorf("%d bytes, room for %d", n, artifactLen(a))
		}
		if !strings.HasPrefix(string(got), "prefix") {
			return "", errors.New("the buffer's bytes were overwritten")
		}
		return string(got[len("prefix"):]), nil
	},
	Reference: func(a *capsule.Artifact) (string, error) { b, err := json.Marshal(a); return string(b), err },
	Errors:    differential.SameError,
	Seeds: func() (out []*capsule.Artifact) {
		for _, c := range artifactContents {
			out = append(out, fuzzArtifact("artifact:x/1", "application/json", c, 3, 0.01, 1700000000123456789))
		}
		return append(out, fuzzArtifact("a<b>&\"c\"\\\u2028", "\xff", "{\"a\":\"\u2029\"}", -1, 1e-7, -62135596800000000000/1e9))
	}(),
	Generate: randomArtifact,
	Count:    20000,
	// Size, dollars and nanoseconds (8 bytes each), then the ref, the
	// media type and the content, apart by zero bytes.
	Decode: func(b []byte) (*capsule.Artifact, bool) {
		if len(b) < 24 {
			return nil, false
		}
		parts := strings.SplitN(string(b[24:]), "\x00", 3)
		for len(parts) < 3 {
			parts = append(parts, "")
		}
		return fuzzArtifact(parts[0], parts[1], parts[2], int64(binary.LittleEndian.Uint64(b)),
			math.Float64frombits(binary.LittleEndian.Uint64(b[8:])), int64(binary.LittleEndian.Uint64(b[16:]))), true
	},
	Encode: func(a *capsule.Artifact) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(a.Size))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(a.Usage.Dollars))
		b = binary.LittleEndian.AppendUint64(b, uint64(a.CreatedAt.UnixNano()))
		return append(b, a.Ref+"\x00"+a.MediaType+"\x00"+string(a.Content)...)
	},
}

// fuzzArtifact is an artifact with every member set from a few values.
func fuzzArtifact(ref, media, content string, n int64, dollars float64, nanos int64) *capsule.Artifact {
	return &capsule.Artifact{
		SchemaVersion: "1.0", Ref: ref, CapsuleID: ref, ProducerAgentID: media, MediaType: media, SHA256: ref,
		Cycle: int(n), Size: n, Usage: capsule.Usage{Tokens: n, Dollars: dollars},
		CreatedAt: time.Unix(0, nanos).UTC(), Content: json.RawMessage(content),
	}
}

func TestDifferential(t *testing.T) {
	t.Parallel()
	differential.RunAll(t, differential.Registry{artifactJSONPair, objectInfoPair, phaseSubjectPair, stepIDFormPair, canonicalIntPair, pooledMsgsPair})
}

// artifactContents are contents of every shape: none, empty, JSON written
// compactly and loosely, with strings holding what encoding/json escapes
// for HTML (and U+2028, U+2029), and text that is not JSON.
var artifactContents = []string{
	"", `{}`, `{"summary":"stub artifact for Benchmark capsule","cycle":1}`,
	" { \"a\" : [ 1 , 2.50 , -0 , 1e400 ] ,\n\t\"b\" : \"x y\" } ", `"a<b>&c"`, "\"\u2028\u2029\"", `"é\u00e9"`,
	`[true,false,null]`, `{"a":1`, `nope`, `{"a":1} {}`, "\"\xff\"", `"\ud800"`, ` 12 `, `[]`, "{\"\u00e2\":1}",
}

// randomArtifact is an artifact of strings of every shape (JSON escapes,
// HTML characters, non-ASCII, invalid UTF-8), numbers to their limits,
// dollars across encoding/json's switch to exponents, times MarshalJSON
// refuses, and contents of every shape.
func randomArtifact(rng *rand.Rand) *capsule.Artifact {
	const alphabet = "abcXYZ019-_/.=:\"\\<>&\n\x7f\x00é\xff "
	str := func() string {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		if rng.IntN(3) > 0 { // mostly plain, as Put's are
			return "artifact:0190a1b2-c3d4/1"[:rng.IntN(25)]
		}
		return string(b)
	}
	dollars := []float64{0, math.Copysign(0, -1), 0.01, 1e-6, 9.99e-7, 1e21, 9.99e20, 123456.789, 1e-300, -2.5,
		math.MaxFloat64, math.SmallestNonzeroFloat64, math.Inf(1), math.NaN()}
	a := capsule.Artifact{
		SchemaVersion: str(), Ref: str(), CapsuleID: str(), ProducerAgentID: str(), MediaType: str(), SHA256: str(),
		Cycle: int(rng.Int64()) >> rng.IntN(64), Size: rng.Int64() >> rng.IntN(64),
		Usage:     capsule.Usage{Tokens: rng.Int64() >> rng.IntN(64) * int64(1-2*rng.IntN(2)), Dollars: dollars[rng.IntN(len(dollars))]},
		CreatedAt: artifactTime(rng),
	}
	if rng.IntN(4) == 0 {
		a.Usage.Dollars = math.Float64frombits(rng.Uint64())
	}
	if c := artifactContents[rng.IntN(len(artifactContents))]; c != "" || rng.IntN(2) == 0 {
		a.Content = json.RawMessage(c)
	}
	return &a
}

func artifactTime(rng *rand.Rand) time.Time {
	switch rng.IntN(4) {
	case 0:
		return time.Date(rng.IntN(12000)-1000, 1, 1, 0, 0, 0, 0, time.UTC)
	case 1:
		return time.Unix(rng.Int64N(1<<33), rng.Int64N(1e9)).In(time.FixedZone("x", 3600*(rng.IntN(27)-13)))
	case 2:
		return time.Time{}
	}
	return time.Now().UTC()
}

// FuzzArtifactJSON: any artifact Put encodes is encoded as json.Marshal
// encodes it, or refused with its error (artifactJSONPair).
func FuzzArtifactJSON(f *testing.F) { differential.Fuzz(f, artifactJSONPair) }

// BenchmarkArtifactJSON encodes the artifact the stub executor makes, by
// hand and by json.Marshal.
func BenchmarkArtifactJSON(b *testing.B) {
	a := capsule.Artifact{
		SchemaVersion: "1.0", Ref: "artifact:0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/1",
		CapsuleID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", ProducerAgentID: "stub", Cycle: 1,
		MediaType: "application/json", SHA256: "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU47DEQpj8HBSa+/TImW+5J",
		Size: 160, Usage: capsule.Usage{Tokens: 1000, Dollars: 0.01}, CreatedAt: time.Now().UTC(),
		Content: json.RawMessage(`{"cycle":1,"idempotency_key":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/1",` +
			`"summary":"stub artifact for Benchmark capsule","target":"kv:BENCH_TARGETS/t"}`),
	}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = appendArtifact(make([]byte, 0, artifactLen(&a)), &a)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = json.Marshal(&a)
		}
	})
}

// TestArtifactPutMessages reads back the messages Put wrote as objects (a
// store with no records bucket writes every record as one), from pooled
// messages one after another: every chunk without headers, the chunks
// together json.Marshal's bytes, and the metadata with the rollup header
// alone. TestArtifactRecordMessages does the same for records.
func TestArtifactPutMessages(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	st, err := ensureTopology(ctx, js, Topology{}.withDefaults())
	require.NoError(t, err)
	w := newArtifactStore(st.artifacts, nil, js)
	var want []string // each artifact's bytes, in order
	for i, size := range []int{10, 2*maxChunk + 5, 0, 7} {
		a := capsule.Artifact{
			SchemaVersion: "1.0", CapsuleID: "01J00000000000000000000000", ProducerAgentID: "agent", Cycle: i + 1,
			MediaType: "application/json", Content: []byte(`{"x": "` + strings.Repeat("y", size) + `"}`), CreatedAt: time.Now().UTC(),
		}
		a.Ref = ArtifactRef(a.CapsuleID, a.Cycle)
		b, err := json.Marshal(a)
		require.NoError(t, err)
		want = append(want, string(b))
		_, err = w.Put(ctx, a)
		require.NoError(t, err)
	}
	stream, err := js.Stream(ctx, "OBJ_"+ArtifactsBucket)
	require.NoError(t, err)
	var body []byte
	var got []string
	for seq := uint64(1); ; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		require.NoError(t, err)
		for _, k := range []string{"Nats-Sequence", "Nats-Stream", "Nats-Subject", "Nats-Time-Stamp", "Nats-Num-Pending", "Nats-Last-Sequence"} {
			delete(m.Header, k) // the server's, on a direct get
		}
		if strings.HasPrefix(m.Subject, chunkPrefix) {
			require.Empty(t, m.Header, "chunk %d", seq)
			body = append(body, m.Data...)
			continue
		}
		require.True(t, strings.HasPrefix(m.Subject, metaPrefix), m.Subject)
		require.Equal(t, nats.Header{jetstream.MsgRollup: {jetstream.MsgRollupSubject}}, m.Header, "metadata %d", seq)
		got, body = append(got, string(body)), nil
	}
	require.Equal(t, want, got)
}

// msgSink makes the benchmark's messages escape, as Publish makes them.
var msgSink *nats.Msg

// BenchmarkArtifactMsgs makes an artifact's two messages (one chunk, the
// metadata), pooled and as nats.NewMsg makes them.
func BenchmarkArtifactMsgs(b *testing.B) {
	body := make([]byte, 400)
	b.Run("pooled", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			p := jspub.GetMsg(chunkPrefix+"AbCdEfGhIjKlMnOpQrStUv", body)
			msgSink = p.Msg()
			p.Release()
			p = jspub.GetMsg(metaPrefix+"MDE5MGExYjIt", body)
			p.Headers().Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
			msgSink = p.Msg()
			p.Release()
		}
	})
	b.Run("nats.NewMsg", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			m := nats.NewMsg(chunkPrefix + "AbCdEfGhIjKlMnOpQrStUv")
			m.Data = body
			msgSink = m
			m = nats.NewMsg(metaPrefix + "MDE5MGExYjIt")
			m.Data = body
			m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
			msgSink = m
		}
	})
}

// TestArtifactPutsConcurrent: puts at once, each from a recycled buffer,
// every artifact read back as it was put (run with -race), both as objects
// (a store with no records bucket) and as records.
func TestArtifactPutsConcurrent(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	st, err := ensureTopology(ctx, js, Topology{}.withDefaults())
	require.NoError(t, err)
	artifact := func(form, g, i int) capsule.Artifact {
		return capsule.Artifact{
			SchemaVersion: "1.0", CapsuleID: fmt.Sprintf("01J000000000000000000000%d%d", form, g), ProducerAgentID: "agent", Cycle: i + 1,
			MediaType: "application/json", Content: []byte(fmt.Sprintf(`{"g": %d, "i": %d, "pad": "%s"}`, g, i, strings.Repeat("z", 50*i))),
			Usage: capsule.Usage{Tokens: int64(i), Dollars: float64(g) / 100}, CreatedAt: time.Unix(int64(1e9+i), int64(g)).UTC(),
		}
	}
	for form, records := range []jetstream.KeyValue{nil, st.artifactRecords} {
		w := newArtifactStore(st.artifacts, records, js)
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Go(func() {
				for i := range 20 {
					if _, err := w.Put(ctx, artifact(form, g, i)); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		r := newArtifactStore(st.artifacts, st.artifactRecords, js) // no in-process copies: reads JetStream
		for g := range 6 {
			for i := range 20 {
				want := artifact(form, g, i)
				want.Ref = ArtifactRef(want.CapsuleID, want.Cycle)
				wantJSON, err := json.Marshal(want)
				require.NoError(t, err)
				got, err := r.Get(ctx, want.Ref)
				require.NoError(t, err)
				gotJSON, err := json.Marshal(got)
				require.NoError(t, err)
				require.Equal(t, string(wantJSON), string(gotJSON))
			}
		}
	}
	kv, err := js.Stream(ctx, "KV_"+ArtifactRecordsBucket)
	require.NoError(t, err)
	require.Equal(t, uint64(6*20), kv.CachedInfo().State.Msgs, "the second form's, one message each")
}
