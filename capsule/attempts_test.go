package capsule

import (
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
