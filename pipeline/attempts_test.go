package pipeline_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/admin"
	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/executors"
	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/schemas"
)

// attemptsCount reads sagad_agent_attempts_total{role,result}.
func attemptsCount(t *testing.T, reg *prometheus.Registry, role, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "sagad_agent_attempts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["role"] == role && l["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// setupAttempts is a pipeline with the flaky executor whose INFO lines and
// metrics the test reads.
func setupAttempts(t *testing.T, code, fails int) (*fixture, *logLines, *prometheus.Registry) {
	dir := t.TempDir()
	logs := &logLines{t: t}
	reg := prometheus.NewRegistry()
	f := setupWith(t, func(c *pipeline.Config) {
		c.Executors.RegisterExecutor("flaky", flakyCommand(dir, code, fails))
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		c.Metrics = metrics.New(reg, metrics.BuildInfo{})
	})
	return f, logs, reg
}

// TestFailedAttemptsVisible: a call retried then halted on shows each
// failed attempt in status (attempt, exit code, decision), in history as
// attempt_failed events, in one INFO line each and in
// sagad_agent_attempts_total.
func TestFailedAttemptsVisible(t *testing.T) {
	t.Parallel()
	f, logs, reg := setupAttempts(t, executors.ExitFailure, 5)
	ctx := context.Background()
	doc := policyDoc(t, f)
	f.publish(t, doc.Sealed(t))
	s := f.wait(t, doc.ID())
	require.Equal(t, capsule.Halted, s.State)

	require.Len(t, s.Attempts, 2)
	for i, want := range []string{capsule.AttemptRetried, capsule.AttemptHalted} {
		a := s.Attempts[i]
		require.Equal(t, capsule.Execution, a.Phase)
		require.Equal(t, 1, a.Cycle)
		require.Equal(t, i+1, a.Attempt)
		require.Equal(t, executors.ExitFailure, a.ExitCode)
		require.Equal(t, want, a.Decision)
		require.Contains(t, a.Error, "try again")
		require.False(t, a.At.IsZero())
	}
	cp, err := f.client.Checkpoint(ctx, doc.ID())
	require.NoError(t, err)
	require.NoError(t, schemas.ValidateValue(schemas.Checkpoint, cp))

	evs, err := f.client.History(ctx, doc.ID())
	require.NoError(t, err)
	var failed []capsule.Event
	halted := -1
	for i, ev := range evs {
		switch ev.Kind {
		case capsule.EventAttemptFailed:
			failed = append(failed, ev)
		case capsule.EventHalted:
			halted = i
		}
	}
	require.Len(t, failed, 2, "one attempt_failed event per failed attempt")
	require.NotEqual(t, failed[0].ID, failed[1].ID)
	require.Contains(t, failed[0].Detail, "attempt 1 exit 1")
	require.Contains(t, failed[0].Detail, "-> retry")
	require.Contains(t, failed[1].Detail, "-> halt")
	require.Greater(t, halted, 0)

	require.Equal(t, 2, logs.count("agent attempt failed", "capsule_id="+doc.ID(), "role=executor"))
	require.Equal(t, 1, logs.count("agent attempt failed", "attempt=1", "decision=retry", "exit_code=1"))
	require.Equal(t, 1, logs.count("agent attempt failed", "attempt=2", "decision=halt"))
	require.Equal(t, 1.0, attemptsCount(t, reg, "executor", "retry"))
	require.Equal(t, 1.0, attemptsCount(t, reg, "executor", "halt"))
	require.Equal(t, 0.0, attemptsCount(t, reg, "executor", "ok"))
}

// TestPausedStatusSaysWhy: a capsule the failure policy pauses shows its
// trigger and reason in status, and its attempt with decision pause; the
// resumed call that succeeds counts ok.
func TestPausedStatusSaysWhy(t *testing.T) {
	t.Parallel()
	f, logs, reg := setupAttempts(t, executors.ExitNeedsEscalation, 1)
	ctx := context.Background()
	doc := policyDoc(t, f)
	f.publish(t, doc.Sealed(t))
	s := f.waitState(t, doc.ID(), capsule.Paused)
	require.NotNil(t, s.Pause)
	require.Equal(t, capsule.TriggerBlockedExternal, s.Pause.Trigger)
	require.Contains(t, s.Pause.Reason, "needs escalation (exit status 11)")
	require.Equal(t, capsule.BySagad, s.Pause.By)
	require.Len(t, s.Attempts, 1)
	require.Equal(t, capsule.AttemptPaused, s.Attempts[0].Decision)
	require.Equal(t, executors.ExitNeedsEscalation, s.Attempts[0].ExitCode)
	require.Equal(t, 1, logs.count("agent attempt failed", "decision=pause"))

	_, err := f.admin(t).Resume(ctx, doc.ID(), admin.ResumeOptions{By: "alice"})
	require.NoError(t, err)
	s = f.wait(t, doc.ID())
	require.Equal(t, capsule.Completed, s.State, s.HaltReason)
	require.Nil(t, s.Pause, "only a paused capsule has a pause")
	require.Len(t, s.Attempts, 1, "the record stays after the capsule goes on")
	require.Equal(t, 1.0, attemptsCount(t, reg, "executor", "pause"))
	require.Equal(t, 1.0, attemptsCount(t, reg, "executor", "ok"))
}
