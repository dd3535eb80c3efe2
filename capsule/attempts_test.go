package capsule

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLogAttempt: a call logged again changes nothing, and the log keeps
// the newest MaxAttemptLog calls.
func TestLogAttempt(t *testing.T) {
	t.Parallel()
	var st CheckpointState
	at := time.Date(2026, 11, 25, 1, 2, 3, 0, time.FixedZone("X", 3600))
	a := FailedAttempt{Phase: Execution, Cycle: 1, Attempt: 1, ExitCode: 12, Error: "boom", Decision: AttemptRetried, At: at}
	require.True(t, st.LogAttempt(a))
	require.False(t, st.LogAttempt(a), "a redelivery records the same call again")
	require.Equal(t, at.UTC(), st.AttemptLog[0].At)
	for n := 2; n <= MaxAttemptLog+5; n++ {
		a.Attempt = n
		require.True(t, st.LogAttempt(a))
	}
	require.Len(t, st.AttemptLog, MaxAttemptLog)
	require.Equal(t, 6, st.AttemptLog[0].Attempt, "the oldest go first")
	require.Equal(t, MaxAttemptLog+5, st.AttemptLog[MaxAttemptLog-1].Attempt)
}

// TestDependencyCycleReason: the ids are sorted and de-duplicated, so every
// member of a cycle states the same reason; a long cycle names the first
// MaxCycleIDs and how many more.
func TestDependencyCycleReason(t *testing.T) {
	t.Parallel()
	require.Equal(t, "dependency_cycle:a,b,c", DependencyCycle([]string{"c", "a", "b", "a"}).String())
	require.Equal(t, DependencyCycle([]string{"b", "a"}), DependencyCycle([]string{"a", "b"}))
	var ids []string
	for i := range MaxCycleIDs + 3 {
		ids = append(ids, fmt.Sprintf("01J%023d", i))
	}
	r := DependencyCycle(ids)
	require.Equal(t, CodeDependencyCycle, r.Code)
	require.True(t, strings.HasSuffix(r.Detail, ",+3 more"), r.Detail)
	require.LessOrEqual(t, len(r.Detail), MaxReasonDetail)
}
