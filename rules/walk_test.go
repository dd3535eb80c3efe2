package rules

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

type visit struct {
	field, s, member string
	isKey            bool
}

func visits(walk func([]byte, func(func() string, string, bool, string)) error, raw []byte) ([]visit, error) {
	var out []visit
	err := walk(raw, func(field func() string, s string, isKey bool, member string) {
		out = append(out, visit{field(), s, member, isKey})
	})
	return out, err
}

// TestWalkStringsMatchesTokenWalk: on valid documents the walk sees what the
// encoding/json token walk saw, field paths included; on broken ones both
// fail (Rule 9 then scans the bytes as text).
func TestWalkStringsMatchesTokenWalk(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../examples/capsules/*")
	require.NoError(t, err)
	require.NotEmpty(t, files, "the example capsules are the corpus")
	r := rand.New(rand.NewPCG(3, 5))
	var corpus [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		corpus = append(corpus, b)
		for i := 0; i < 200; i++ {
			bad := append([]byte(nil), b...)
			at := r.IntN(len(bad))
			bad[at] = `{}[],:"\ x0`[r.IntN(11)]
			corpus = append(corpus, bad)
		}
	}
	corpus = append(corpus, []byte(`{"a":{"b c":["x",{"password":"p","k":1}],"a":"dup"},"token":"ghp_0123456789abcdefghijABCDEFGHIJ012345"}`))
	for _, raw := range corpus {
		want, werr := visits(walkStringsTokens, raw)
		got, gerr := visits(walkStrings, raw)
		require.Equal(t, werr == nil, gerr == nil, "%q: %v vs %v", raw, werr, gerr)
		if werr == nil {
			require.Equal(t, want, got, fmt.Sprintf("%q", raw))
		}
	}
}

func FuzzWalkStringsMatchesTokenWalk(f *testing.F) {
	f.Add([]byte(`{"a":["x",{"b":"y"}],"c":1}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		want, werr := visits(walkStringsTokens, raw)
		got, gerr := visits(walkStrings, raw)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%q: %v vs %v", raw, werr, gerr)
		}
		if werr == nil && fmt.Sprint(want) != fmt.Sprint(got) {
			t.Fatalf("%q: %v vs %v", raw, want, got)
		}
	})
}
