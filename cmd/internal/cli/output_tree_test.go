package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/compose"
)

// TestCompositionTree: composition status prints every step exactly once,
// indented under its first need, a fan-in naming its other needs; a chain
// is a staircase; needs naming no step, or a cycle of first needs (a
// forged record), still print every step rather than loop or drop one.
func TestCompositionTree(t *testing.T) {
	t.Parallel()
	tree := func(steps ...compose.StepOutcome) []string {
		var b bytes.Buffer
		require.NoError(t, printComposition(&b, compose.Outcome{CompositionID: "c", Run: 1, State: "running", Steps: steps}))
		var out []string
		for _, l := range strings.Split(b.String(), "\n")[2:] {
			if l != "" {
				out = append(out, strings.TrimRight(l[:strings.Index(l, "id-")], " "))
			}
		}
		return out
	}
	s := func(name string, needs ...string) compose.StepOutcome {
		return compose.StepOutcome{Name: name, CapsuleID: "id-" + name, State: "running", Needs: needs}
	}
	require.Equal(t, []string{"draft", "  fr", "    merge (+de,es)", "  de", "  es", "other"},
		tree(s("draft"), s("fr", "draft"), s("de", "draft"), s("es", "draft"), s("merge", "fr", "de", "es"), s("other")))
	require.Equal(t, []string{"step-0", "  step-1", "    step-2"},
		tree(s("step-0"), s("step-1", "step-0"), s("step-2", "step-1")))
	require.Equal(t, []string{"a", "b"}, tree(s("a", "a"), s("b", "nowhere")))
	require.Equal(t, []string{"x", "  y"}, tree(s("x", "y"), s("y", "x")))
	// A name that is markup or a control sequence prints escaped.
	lines := tree(s("\x1b[2Jboom"))
	require.Len(t, lines, 1)
	require.NotContains(t, lines[0], "\x1b")
}

// TestCompositionLoopsPrinted: composition status prints each loop's
// state, round and findings per ended round, and the decision a loop
// stopped for no progress waits for.
func TestCompositionLoopsPrinted(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	require.NoError(t, printComposition(&b, compose.Outcome{CompositionID: "c", Run: 1, State: "paused", Reason: "no_progress",
		Steps: []compose.StepOutcome{{Name: "draft", CapsuleID: "id-1", State: "completed"}, {Name: "check", CapsuleID: "id-2", State: "halted"}},
		Loops: []compose.LoopOutcome{{Verifier: "check", Steps: []string{"draft"}, MaxRounds: 5, Round: 3, State: "no_progress",
			Rounds: []compose.RoundOutcome{{Round: 1, Ended: true, Findings: 2}, {Round: 2, Ended: true, Findings: 2}, {Round: 3, Ended: true, Findings: 3}}}}}))
	require.Contains(t, b.String(), "composition c run 1: paused (no_progress) (")
	require.Contains(t, b.String(), "loop draft verified by check: no_progress, round 3 of 5, findings per round [2 2 3]\n")
	require.Contains(t, b.String(), "sagactl composition decide c check accept|reject --by WHO")
}

// TestCompositionLoopRoundsPrinted: status lists every round's capsules
// under the round, a round before the last marked superseded; a loop
// stopped at max_rounds shows its verifier as the loop's stop, not as a
// failed step, and a passed loop's verifier keeps its artifact.
func TestCompositionLoopRoundsPrinted(t *testing.T) {
	t.Parallel()
	one := 1
	for _, tc := range []struct {
		name, state string
		want, not   []string
	}{
		{"max_rounds", "failed", []string{"check id-2 stopped 1 verifier: stopped after round 2 (max_rounds)"}, []string{"review_rejected"}},
		{"no_progress", "no_progress", []string{"check id-2 stopped 1 verifier: stopped after round 2 (no_progress, waits for a decision)"}, nil},
		{"passed", "passed", []string{"check id-2 halted 1 review_rejected"}, []string{"stopped"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			require.NoError(t, printComposition(&b, compose.Outcome{CompositionID: "c", Run: 1, State: "failed",
				Steps: []compose.StepOutcome{{Name: "draft", CapsuleID: "id-1", State: "completed"},
					{Name: "check", CapsuleID: "id-2", State: "halted", ExitCode: &one, HaltReason: "review_rejected", Needs: []string{"draft"}}},
				Loops: []compose.LoopOutcome{{Verifier: "check", Steps: []string{"draft"}, MaxRounds: 2, Round: 2, State: tc.state,
					Rounds: []compose.RoundOutcome{{Round: 1, CapsuleIDs: []string{"id-0", "id-9"}, Ended: true, Findings: 2},
						{Round: 2, CapsuleIDs: []string{"id-1", "id-2"}, Ended: true, Findings: 1}}}}}))
			out := b.String()
			require.Contains(t, out, "  round 1: draft id-0, check id-9 (2 findings, superseded)\n")
			require.Contains(t, out, "  round 2: draft id-1, check id-2 (1 findings)\n")
			var words []string // the table's columns, one space apart
			for _, l := range strings.Split(out, "\n") {
				words = append(words, strings.Join(strings.Fields(l), " "))
			}
			for _, w := range tc.want {
				require.Contains(t, words, w)
			}
			for _, n := range tc.not {
				require.NotContains(t, out, n)
			}
		})
	}
}

// TestCompositionProgressLine: composition wait's progress line says the
// run's state (and why it is paused) and its counts.
func TestCompositionProgressLine(t *testing.T) {
	t.Parallel()
	require.Equal(t, "composition c run 2: paused (no_progress), 1 of 3 passed, 1 failed",
		progressLine(compose.Outcome{CompositionID: "c", Run: 2, State: "paused", Reason: "no_progress", Summary: compose.Summary{Total: 3, Passed: 1, Failed: 1}}))
	require.NotContains(t, progressLine(compose.Outcome{CompositionID: "c\x1b[2J", Run: 1, State: "running"}), "\x1b")
}
