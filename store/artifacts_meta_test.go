package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sagad/sagad/internal/differential"
)

// objectInfo is the metadata Put writes for these values.
func objectInfo(name, id, digest string, chunk uint32, size uint64, chunks uint32, mod time.Time) *jetstream.ObjectInfo {
	return &jetstream.ObjectInfo{
		ObjectMeta: jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: chunk}},
		Bucket:     ArtifactsBucket, NUID: id, Size: size, ModTime: mod, Chunks: chunks, Digest: digest,
	}
}

// objectInfoPair holds the artifact metadata's encoding to json.Marshal:
// the same bytes after what the buffer held, an error exactly where
// json.Marshal errs, and a plain one fits the room objectInfoLen makes.
var objectInfoPair = differential.Pair[*jetstream.ObjectInfo, string]{
	Name: "ObjectInfo",
	Fast: func(info *jetstream.ObjectInfo) (string, error) {
		got, err := appendObjectInfo([]byte("prefix"), info)
		if err != nil {
			return "", err
		}
		if n := len(got) - len("prefix"); plainObjectInfo(info) && n > objectInfoLen(info) {
			return "", fmt.Errorf("%d bytes, room for %d", n, objectInfoLen(info))
		}
		if !strings.HasPrefix(string(got), "prefix") {
			return "", errors.New("the buffer's bytes were overwritten")
		}
		return string(got[len("prefix"):]), nil
	},
	Reference: func(info *jetstream.ObjectInfo) (string, error) { b, err := json.Marshal(info); return string(b), err },
	Seeds:     objectInfoSeeds(),
	Generate:  randomObjectInfo,
	Count:     20000,
	// Chunk size (4 bytes), size and nanoseconds (8 each), then the name,
	// the id and the digest, apart by zero bytes.
	Decode: func(b []byte) (*jetstream.ObjectInfo, bool) {
		if len(b) < 20 {
			return nil, false
		}
		parts := strings.SplitN(string(b[20:]), "\x00", 3)
		for len(parts) < 3 {
			parts = append(parts, "")
		}
		return objectInfo(parts[0], parts[1], parts[2], binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint64(b[4:]), 1,
			time.Unix(0, int64(binary.LittleEndian.Uint64(b[12:]))).UTC()), true
	},
	Encode: func(info *jetstream.ObjectInfo) []byte {
		var chunk uint32
		if info.Opts != nil {
			chunk = info.Opts.ChunkSize
		}
		b := binary.LittleEndian.AppendUint32(nil, chunk)
		b = binary.LittleEndian.AppendUint64(b, info.Size)
		b = binary.LittleEndian.AppendUint64(b, uint64(info.ModTime.UnixNano()))
		return append(b, info.Name+"\x00"+info.NUID+"\x00"+info.Digest...)
	},
}

// objectInfoSeeds are Put's plain metadata, it with every member Put does
// not set and with times MarshalJSON refuses, and the fuzzer's first two.
func objectInfoSeeds() []*jetstream.ObjectInfo {
	plain := objectInfo("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/1", "AbCdEfGhIjKlMnOpQrStUv",
		"SHA-256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU=", minChunk, 700, 1, time.Date(2026, 11, 26, 1, 2, 3, 400500000, time.UTC))
	out := []*jetstream.ObjectInfo{plain,
		objectInfo("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/1", "AbCdEfGhIjKlMnOpQrStUv", "SHA-256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU=", 4096, 700, 1, time.Unix(0, 1764118923400500000).UTC()),
		objectInfo("a<b>&\"c\"\\\u2028/2", "", "", 0, 0, 1, time.Unix(0, -62135596800000000000/1e9).UTC()),
	}
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
		out = append(out, &info)
	}
	return out
}

// randomObjectInfo is metadata with names and ids of every shape (JSON
// escapes, HTML characters, non-ASCII, invalid UTF-8), sizes to their
// limits, times in and out of the years MarshalJSON writes, with and
// without nanoseconds and trailing zeros.
func randomObjectInfo(rng *rand.Rand) *jetstream.ObjectInfo {
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
	info := objectInfo("cap-"+str(40)+"/1", str(25), "SHA-256="+str(50), rng.Uint32(), rng.Uint64(), rng.Uint32(), when())
	if rng.IntN(3) == 0 {
		info.Opts.ChunkSize = uint32(rng.IntN(3)) * minChunk
		info.Size, info.Chunks = uint64(rng.IntN(1000)), uint32(rng.IntN(3))
		info.Name, info.NUID, info.Digest = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/"+str(3), "AbCdEfGhIjKlMnOpQrStUv", ""
	}
	return info
}

// FuzzObjectInfoAsMarshal: objectInfoPair over names, ids and digests the
// fuzzer makes.
func FuzzObjectInfoAsMarshal(f *testing.F) { differential.Fuzz(f, objectInfoPair) }

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
