package capsule

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkpointStrings are the kinds of string a checkpoint holds, in about
// the proportions of one: ids, names, digests, refs, a halt reason.
var checkpointStrings = []string{
	"1.0", "0f8fad5b-d9cb-469f-a165-70867728950e", "0f8fad5b-d9cb-469f-a165-70867728950e",
	"4bf92f3577b34da6a3ce929d0e0e4736", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "2026.11.3+0123abcd",
	"REVIEW", "in_progress", "repo:sagad/capsule", "artifact:0f8fad5b-d9cb-469f-a165-70867728950e/1",
	"RECEPTION", "passed", "PLANNING", "passed", "EXECUTION", "passed", "REVIEW", "approved",
	"sagad-1/worker-3", "max_cycles_exceeded:3",
}

// TestAppendStringLongRandom holds appendString to encoding/json on longer
// strings, mostly plain ASCII with a rare byte that needs care, so that
// every offset of an escape within a run of plain bytes is met.
func TestAppendStringLongRandom(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	rare := []string{"é", "\u2028", "\u2029", "<", ">", "&", "\"", "\\", "\n", "\x00", "\x1f", "\x7f", "\xff", "\xe2\x80", "\xe2\x80\xa8"[:2], "😀", "\ufffd", "\xc0\x80", "\xed\xa0\x80"}
	for i := 0; i < 20000; i++ {
		var sb strings.Builder
		for n := r.IntN(40); n > 0; n-- {
			if r.IntN(8) == 0 {
				sb.WriteString(rare[r.IntN(len(rare))])
			} else {
				sb.WriteByte(byte(0x20 + r.IntN(0x60)))
			}
		}
		s := sb.String()
		want, err := json.Marshal(s)
		require.NoError(t, err)
		require.Equal(t, string(want), string(appendString([]byte("x"), s))[1:], "%q", s)
	}
	for _, s := range checkpointStrings {
		want, _ := json.Marshal(s)
		require.Equal(t, string(want), string(appendString(nil, s)))
	}
}

// FuzzAppendString: any string encodes as encoding/json encodes it.
func FuzzAppendString(f *testing.F) {
	for _, s := range append(checkpointStrings, "", "a\u2028b", "<&>", "\xff\xfe", "tab\there", "01234567\"9abcdef", "0123456789abcde\x01") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendString(nil, s); string(got) != string(want) {
			t.Fatalf("appendString(%q) = %s, encoding/json %s", s, got, want)
		}
	})
}

func BenchmarkAppendString(b *testing.B) {
	var buf []byte
	for b.Loop() {
		buf = buf[:0]
		for _, s := range checkpointStrings {
			buf = appendString(buf, s)
		}
	}
}
