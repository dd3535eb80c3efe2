package differential

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// recorder is a testing.TB that records a failure instead of failing the
// test, so that the harness's own test sees its verdicts.
type recorder struct {
	testing.TB
	failed bool
}

type stop struct{}

func (r *recorder) Helper()                   {}
func (r *recorder) Errorf(string, ...any)     { r.failed = true }
func (r *recorder) FailNow()                  { r.failed = true; panic(stop{}) }
func (r *recorder) Fatalf(f string, a ...any) { r.Errorf(f, a...); r.FailNow() }

// verdict runs p.Check on in and reports whether it failed.
func verdict[In, Out any](t *testing.T, p Pair[In, Out], in In) (failed bool) {
	r := &recorder{TB: t}
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(stop); !ok {
				panic(v)
			}
		}
		failed = r.failed
	}()
	p.Check(r, in)
	return r.failed
}

var errBad = errors.New("bad")

func atoi(s string) (int, error) { return strconv.Atoi(s) }

// TestCheckFindsDisagreements: the harness fails a pair exactly where its
// routines disagree, in results or in errors, under each error rule.
func TestCheckFindsDisagreements(t *testing.T) {
	t.Parallel()
	wrongOn7 := func(s string) (int, error) {
		if s == "7" {
			return 8, nil
		}
		return strconv.Atoi(s)
	}
	declines := func(s string) (int, error) {
		if len(s) > 1 {
			return 0, errBad
		}
		return strconv.Atoi(s)
	}
	acceptsAll := func(s string) (int, error) { n, _ := strconv.Atoi(s); return n, nil }
	tests := []struct {
		name string
		fast func(string) (int, error)
		rule ErrorRule
		in   string
		fail bool
	}{
		{"same", atoi, BothOrNeither, "12", false},
		{"same error", atoi, BothOrNeither, "x", false},
		{"other result", wrongOn7, BothOrNeither, "7", true},
		{"other result elsewhere", wrongOn7, BothOrNeither, "6", false},
		{"fast fails alone", declines, BothOrNeither, "12", true},
		{"fast declines", declines, FastMayDecline, "12", false},
		{"fast accepts what the reference refuses", acceptsAll, FastMayDecline, "x", true},
		{"fast accepts what the reference refuses, strict", acceptsAll, BothOrNeither, "x", true},
		{"another error", declines, BothOrNeither, "xx", false},
		{"another error's text", declines, SameError, "xx", true},
		{"the same error's text", atoi, SameError, "xx", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := Pair[string, int]{Name: tt.name, Fast: tt.fast, Reference: atoi, Errors: tt.rule}
			require.Equal(t, tt.fail, verdict(t, p, tt.in))
		})
	}
}

// TestCompareIsUsed: a pair's own comparison replaces equality.
func TestCompareIsUsed(t *testing.T) {
	t.Parallel()
	p := Pair[string, int]{
		Name: "parity", Reference: atoi,
		Fast: func(s string) (int, error) { n, err := strconv.Atoi(s); return n + 2, err },
		Compare: func(t testing.TB, _ string, fast, ref int) {
			require.Equal(t, ref%2, fast%2)
		},
	}
	require.False(t, verdict(t, p, "3"))
	p.Fast = func(s string) (int, error) { n, err := strconv.Atoi(s); return n + 1, err }
	require.True(t, verdict(t, p, "3"))
}

// TestRunDrawsGenerated: Run tries Count generated inputs besides the
// seeds, the same ones every time.
func TestRunDrawsGenerated(t *testing.T) {
	t.Parallel()
	var drawn []int
	p := Pair[int, int]{
		Name: "count", Seeds: []int{1, 2},
		Fast:      func(n int) (int, error) { return n, nil },
		Reference: func(n int) (int, error) { return n, nil },
		Generate:  func(r *rand.Rand) int { n := r.IntN(1000); drawn = append(drawn, n); return n },
		Count:     17,
	}
	Run(t, p)
	require.Len(t, drawn, 17)
	first := drawn
	drawn = nil
	Run(t, p)
	require.Equal(t, first, drawn)
}

// FuzzHarness: the driver's fuzz entry runs a pair over the fuzzer's
// inputs (here a pair that agrees everywhere).
func FuzzHarness(f *testing.F) {
	Fuzz(f, Pair[string, int]{
		Name: "Atoi", Fast: atoi, Reference: atoi, Seeds: []string{"0", "-1", "x", "99999999999999999999"},
		Decode: func(b []byte) (string, bool) { return string(b), true },
		Encode: func(s string) []byte { return []byte(s) },
	})
}
