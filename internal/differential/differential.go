package differential

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// Pair is a fast path and the routine it replaces, over inputs of type In
// with results of type Out.
type Pair[In, Out any] struct {
	// Name names the pair in test output; by convention the fuzz target
	// running it is Fuzz followed by Name.
	Name string
	// Fast is the fast path.
	Fast func(In) (Out, error)
	// Reference is the routine the fast path replaces.
	Reference func(In) (Out, error)
	// Compare fails t when fast and ref (the two results on in, both
	// without error) disagree. Defaults to require.Equal.
	Compare func(t testing.TB, in In, fast, ref Out)
	// Errors says how errors must agree. Defaults to BothOrNeither.
	Errors ErrorRule
	// Seeds is the shared corpus: every input the table test runs and
	// the fuzz target starts from.
	Seeds []In
	// Generate makes a random input; Run draws Count of them from a
	// fixed source, so a failure is repeatable. Optional.
	Generate func(r *rand.Rand) In
	// Count is how many generated inputs Run tries. Defaults to 1,000
	// when Generate is set.
	Count int
	// Decode turns a fuzzer's bytes into an input (false: not one), and
	// Encode an input into the bytes the fuzzer starts from. Required
	// for Fuzz.
	Decode func([]byte) (In, bool)
	Encode func(In) []byte
}

// ErrorRule is how a pair's two errors must agree.
type ErrorRule int

const (
	// BothOrNeither: the fast path fails exactly when the reference
	// does.
	BothOrNeither ErrorRule = iota
	// FastMayDecline: the fast path may fail where the reference does
	// not (it declines, and its caller falls back to the reference),
	// never succeed where the reference fails.
	FastMayDecline
	// SameError: the fast path fails exactly when the reference does,
	// with the same error text (callers show it).
	SameError
)

// Check runs both routines on in and fails t when they disagree.
func (p Pair[In, Out]) Check(t testing.TB, in In) {
	t.Helper()
	fast, ferr := p.Fast(in)
	ref, rerr := p.Reference(in)
	switch p.Errors {
	case FastMayDecline:
		if rerr != nil {
			require.Error(t, ferr, "%s: the fast path accepts what the reference refuses (%v): %#v", p.Name, rerr, in)
			return
		}
		if ferr != nil {
			return
		}
	default:
		require.Equal(t, rerr == nil, ferr == nil, "%s: reference error %v, fast error %v on %#v", p.Name, rerr, ferr, in)
		if rerr != nil {
			if p.Errors == SameError {
				require.Equal(t, rerr.Error(), ferr.Error(), "%s: the errors' text on %#v", p.Name, in)
			}
			return
		}
	}
	if p.Compare != nil {
		p.Compare(t, in, fast, ref)
		return
	}
	require.Equal(t, ref, fast, "%s on %#v", p.Name, in)
}

// Run runs p over its seeds, then over Count generated inputs (two
// subtests; a failure names its input).
func Run[In, Out any](t *testing.T, p Pair[In, Out]) {
	t.Helper()
	t.Run("seeds", func(t *testing.T) {
		for _, in := range p.Seeds {
			p.Check(t, in)
		}
	})
	if p.Generate == nil {
		return
	}
	n := p.Count
	if n == 0 {
		n = 1000
	}
	r := rand.New(rand.NewPCG(36, uint64(len(p.Name))))
	t.Run("generated", func(t *testing.T) {
		for range n {
			p.Check(t, p.Generate(r))
		}
	})
}

// Fuzz makes f the fuzz target of p: its seeds (through Encode) are the
// corpus, and every input Decode accepts must find the routines agreeing.
// The seeds in testdata/fuzz/<target> are added by the fuzzing engine as
// usual.
func Fuzz[In, Out any](f *testing.F, p Pair[In, Out]) {
	if p.Decode == nil || p.Encode == nil {
		f.Fatalf("%s: a pair needs Decode and Encode to be fuzzed", p.Name)
	}
	for _, in := range p.Seeds {
		f.Add(p.Encode(in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if in, ok := p.Decode(b); ok {
			p.Check(t, in)
		}
	})
}

// Case is a registered pair whatever its types.
type Case interface {
	// CaseName is the pair's name.
	CaseName() string
	run(t *testing.T)
}

// CaseName returns p's name.
func (p Pair[In, Out]) CaseName() string { return p.Name }

func (p Pair[In, Out]) run(t *testing.T) { Run(t, p) }

// Registry is a package's pairs.
type Registry []Case

// RunAll runs every pair of r as a subtest named after it; a name used
// twice fails the test.
func RunAll(t *testing.T, r Registry) {
	t.Helper()
	seen := map[string]bool{}
	for _, c := range r {
		require.False(t, seen[c.CaseName()], "pair %s registered twice", c.CaseName())
		seen[c.CaseName()] = true
		t.Run(c.CaseName(), func(t *testing.T) {
			t.Parallel()
			c.run(t)
		})
	}
}
