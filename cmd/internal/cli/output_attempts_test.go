package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/client"
	"github.com/sagad/sagad/status"
)

// TestPrintStatusPauseAndAttempts: the status table says why a capsule
// paused and lists every failed attempt with its exit code and decision.
func TestPrintStatusPauseAndAttempts(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 25, 1, 2, 3, 0, time.UTC)
	s := client.Status{
		CapsuleID: "c", State: capsule.Paused, Phase: 4, PhaseName: "EXECUTION",
		Pause: &status.Pause{Trigger: capsule.TriggerBlockedExternal, Reason: "the executor asks for a person: licence?", By: "sagad", At: at},
		Attempts: []capsule.FailedAttempt{
			{Phase: capsule.Execution, Cycle: 1, Attempt: 1, ExitCode: 1, Error: "try again", Decision: capsule.AttemptRetried, At: at},
			{Phase: capsule.ReviewPhase, Cycle: 1, Attempt: 2, Timeout: true, Error: strings.Repeat("x", 300), Decision: capsule.AttemptPaused, At: at},
		},
	}
	var b strings.Builder
	require.NoError(t, printStatus(&b, s))
	out := b.String()
	require.Contains(t, out, "pause_trigger:")
	require.Contains(t, out, "blocked_external")
	require.Contains(t, out, "pause_reason:")
	require.Contains(t, out, "licence?")
	require.Contains(t, out, "failed attempts:")
	require.Regexp(t, `4 EXECUTION\s+1\s+1\s+1\s+retry\s+try again`, out)
	require.Regexp(t, `5 REVIEW\s+1\s+2\s+timeout\s+pause\s+x+…`, out)
	require.NotContains(t, out, strings.Repeat("x", 200), "a long error is clipped")
}
