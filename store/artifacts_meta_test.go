package store

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// objectInfo is the metadata Put writes for these values.
func objectInfo(name, id, digest string, chunk uint32, size uint64, chunks uint32, mod time.Time) *jetstream.ObjectInfo {
	return &jetstream.ObjectInfo{
		ObjectMeta: jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: chunk}},
		Bucket:     ArtifactsBucket, NUID: id, Size: size, ModTime: mod, Chunks: chunks, Digest: digest,
	}
}

func requireAsMarshal(t *testing.T, info *jetstream.ObjectInfo) {
	t.Helper()
	want, wantErr := json.Marshal(info)
	got, err := appendObjectInfo([]byte("prefix"), info)
	if n := len(got); err == nil && wantErr == nil && plainObjectInfo(info) && n-len("prefix") > objectInfoLen(info) {
		t.Fatalf("%d bytes, room for %d", n, objectInfoLen(info))
	}
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%+v: error %v, json.Marshal's %v", info, err, wantErr)
	}
	if wantErr == nil && string(got) != "prefix"+string(want) {
		t.Fatalf("%+v:\n got %s\nwant prefix%s", info, got, want)
	}
}

// TestObjectInfoAsMarshal holds the artifact metadata's encoding to
// json.Marshal: names and ids of every shape (JSON escapes, HTML
// characters, non-ASCII, invalid UTF-8), sizes to their limits, times in
// and out of the years MarshalJSON writes, with and without nanoseconds
// and trailing zeros, and every member Put does not set.
func TestObjectInfoAsMarshal(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(24, 6))
	const alphabet = "abcXYZ019-_/.=\"\\<>&\n\x7f\x00é\xff "
	str := func(n int) string {
		b := make([]byte, rng.IntN(n))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	when := func() time.Time {
		switch rng.IntN(5) {
		case 0:
			return time.Unix(rng.Int64N(1<<40)-1<<39, 0).UTC()
		case 1:
			return time.Date(rng.IntN(12000)-1000, time.Month(1+rng.IntN(12)), 1+rng.IntN(28), rng.IntN(24), rng.IntN(60), rng.IntN(60), rng.IntN(1000)*1000000, time.UTC)
		case 2:
			return time.Unix(rng.Int64N(1<<33), rng.Int64N(1e9)).In(time.FixedZone("x", 3600*(rng.IntN(27)-13)))
		}
		return time.Now().UTC().Add(time.Duration(rng.Int64N(1 << 50)))
	}
	for range 20000 {
		info := objectInfo("cap-"+str(40)+"/1", str(25), "SHA-256="+str(50), rng.Uint32(), rng.Uint64(), rng.Uint32(), when())
		if rng.IntN(3) == 0 {
			info.Opts.ChunkSize = uint32(rng.IntN(3)) * minChunk
			info.Size, info.Chunks = uint64(rng.IntN(1000)), uint32(rng.IntN(3))
			info.Name, info.NUID, info.Digest = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/"+str(3), "AbCdEfGhIjKlMnOpQrStUv", ""
		}
		requireAsMarshal(t, info)
	}
	plain := objectInfo("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/1", "AbCdEfGhIjKlMnOpQrStUv",
		"SHA-256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU=", minChunk, 700, 1, time.Date(2026, 11, 26, 1, 2, 3, 400500000, time.UTC))
	requireAsMarshal(t, plain)
	for _, change := range []func(*jetstream.ObjectInfo){
		func(i *jetstream.ObjectInfo) { i.Description = "d" },
		func(i *jetstream.ObjectInfo) { i.Headers = nats.Header{"A": {"b"}} },
		func(i *jetstream.ObjectInfo) { i.Metadata = map[string]string{"a": "b"} },
		func(i *jetstream.ObjectInfo) { i.Opts = nil },
		func(i *jetstream.ObjectInfo) {
			i.Opts = &jetstream.ObjectMetaOptions{Link: &jetstream.ObjectLink{Bucket: "b"}, ChunkSize: 9}
		},
		func(i *jetstream.ObjectInfo) { i.Deleted = true },
		func(i *jetstream.ObjectInfo) { i.ModTime = time.Time{} },
		func(i *jetstream.ObjectInfo) { i.ModTime = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) },
		func(i *jetstream.ObjectInfo) { i.ModTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", -90)) },
	} {
		info := *plain
		opts := *plain.Opts
		info.Opts = &opts
		change(&info)
		requireAsMarshal(t, &info)
	}
}

// FuzzObjectInfoAsMarshal: the same, over names, ids and digests the fuzzer
// makes.
func FuzzObjectInfoAsMarshal(f *testing.F) {
	f.Add("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/1", "AbCdEfGhIjKlMnOpQrStUv", "SHA-256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU=", uint32(4096), uint64(700), int64(1764118923400500000))
	f.Add("a<b>&\"c\"\\\u2028/2", "", "", uint32(0), uint64(0), int64(-62135596800000000000/1e9))
	f.Fuzz(func(t *testing.T, name, id, digest string, chunk uint32, size uint64, nanos int64) {
		requireAsMarshal(t, objectInfo(name, id, digest, chunk, size, 1, time.Unix(0, nanos).UTC()))
	})
}

// BenchmarkObjectInfo encodes one artifact's metadata, by hand and by
// json.Marshal.
func BenchmarkObjectInfo(b *testing.B) {
	info := objectInfo("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/1", "AbCdEfGhIjKlMnOpQrStUv",
		"SHA-256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU=", minChunk, 700, 1, time.Now().UTC())
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = appendObjectInfo(make([]byte, 0, objectInfoLen(info)), info)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = json.Marshal(info)
		}
	})
}
