package capsule

import (
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

func BenchmarkAppendString(b *testing.B) {
	var buf []byte
	for b.Loop() {
		buf = buf[:0]
		for _, s := range checkpointStrings {
			buf = appendString(buf, s)
		}
	}
}

// TestQuotedSetsAsAppendString: a constant written from its set is what
// appendString writes, and a string outside the set (an unknown outcome, a
// phase name of another case, one with an escape) still goes through it.
func TestQuotedSetsAsAppendString(t *testing.T) {
	t.Parallel()
	for _, q := range []*quotedSet{outcomes, phaseNamesQuoted, states} {
		require.Len(t, q.quoted, len(q.plain))
		for _, s := range append(append([]string{}, q.plain...), "", "PASSED", "passed ", "pass\"ed", "<halted>", "\u2028", "PHASE_9") {
			require.Equal(t, string(appendString([]byte("x"), s)), string(q.append([]byte("x"), s)), s)
		}
	}
	require.Len(t, phaseNamesQuoted.plain, int(NumPhases))
}
