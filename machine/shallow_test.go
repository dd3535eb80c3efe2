package machine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
)

// full is a checkpoint with every slice and pointer of its state set, each
// slice with room to spare: an append that wrote into a shared array, or a
// write through a shared pointer, would show in it.
func full() *capsule.Checkpoint {
	cp := at(capsule.Paused, capsule.Execution, 1)
	deadline := t0.Add(time.Hour)
	until := t0.Add(time.Minute)
	room := func(s []string) []string { return append(make([]string, 0, 8), s...) }
	cp.History = append(make([]capsule.Transition, 0, 8), capsule.Transition{Phase: capsule.Planning, Cycle: 0, Outcome: capsule.OutcomePassed})
	st := &cp.State
	st.LocksHeld = room([]string{"a.txt"})
	st.ArtifactRefs = room([]string{"artifact:x"})
	st.WaitingFor = room([]string{"dep"})
	st.Findings = append(make([]capsule.Finding, 0, 8), capsule.Finding{Message: "f"})
	st.Reviews = append(make([]capsule.ReviewEntry, 0, 8), capsule.ReviewEntry{Cycle: 1, ReviewerID: "rv", Verdict: capsule.Rejected,
		Findings: []capsule.Finding{{Message: "no"}}})
	st.Warned = append(make([]capsule.Trigger, 0, 8), capsule.TriggerBudgetWarning, capsule.TriggerDeadlineApproaching)
	st.AttemptLog = append(make([]capsule.FailedAttempt, 0, 8), capsule.FailedAttempt{Phase: capsule.Execution, Cycle: 1, Attempt: 1, Decision: capsule.AttemptRetried, At: t0})
	st.Execution = &capsule.ExecutionClaim{Cycle: 1, Holder: "h", ExpiresAt: t0.Add(time.Minute)}
	st.Result = &capsule.ExecutionResult{Cycle: 1, ArtifactRef: "artifact:x"}
	st.Attempts = &capsule.ExecutionAttempts{Cycle: 1, Failed: 1}
	st.Pause = &capsule.PauseInfo{Trigger: capsule.TriggerOperatorManual, Reason: "r", By: "op", At: t0}
	st.LockWaitSince = &until
	st.AwaitingUntil = &until
	st.WaveReserved = &capsule.Usage{Tokens: 1}
	st.OperatorAnswer = &capsule.OperatorAnswer{Text: "yes"}
	st.Answers = append(make([]capsule.OperatorAnswer, 0, 8), capsule.OperatorAnswer{Text: "yes"})
	st.AgentQueries = append(make([]capsule.AgentQuery, 0, 8), capsule.AgentQuery{ID: "q", ReplySubject: "r", Phase: capsule.Execution, Cycle: 1})
	st.Overrides = &capsule.Overrides{Tokens: 5, Dollars: 1, Deadline: &deadline}
	return cp
}

// TestApplyLeavesItsInputAlone: Apply shares with its input what a
// transition does not change, so every event that writes where a shallow
// copy would reach — the claim renewed, the pause's resume token, the
// raised caps, slices appended to — is applied to a checkpoint holding all
// of them, and the input must read as before, deeply, whether the event
// applied or was refused.
func TestApplyLeavesItsInputAlone(t *testing.T) {
	t.Parallel()
	later := t0.Add(48 * time.Hour)
	events := []machine.Event{
		machine.Renew{Cycle: 1, Holder: "h", ExpiresAt: t0.Add(time.Hour)},
		machine.Renew{Cycle: 1, Holder: "other", ExpiresAt: t0.Add(time.Hour)}, // refused: claim lost
		machine.RequestResume{Action: "resume", From: capsule.Paused, Token: "new", Tokens: 50, Dollars: 9, Deadline: &later, Force: true,
			Answer: &capsule.OperatorAnswer{Text: "no", By: "op", At: t0}},
		machine.RequestResume{Action: "resume", From: capsule.Paused, Token: "new", Tokens: -1}, // refused
		machine.Pause{Reason: "again", By: "op"},
		machine.Decide{Phase: capsule.Execution, Cycle: 1, Decision: machine.AdvanceWith(capsule.Finding{Message: "again"})},
		machine.Decide{Phase: capsule.Execution, Cycle: 1, Decision: machine.ParkWith(capsule.TriggerLockContention, "busy")},
		machine.Decide{Phase: capsule.Execution, Cycle: 1, Decision: machine.AdvanceWith()},
		machine.RecordAttempt{Cycle: 1, Holder: "h", Attempt: 2, Failure: capsule.AttemptFailure{ExitCode: 1, Error: "x"}},
		machine.End{State: capsule.Cancelled, Detail: "cancelled"},
		machine.Revise{Rationale: "again", By: "op", CycleLimit: 3},
	}
	for _, ev := range events {
		cp := full()
		before := cp.Clone()
		res, err := machine.Apply(cp, ev, t0.Add(time.Second))
		require.Equal(t, before, cp, "%s (%v) changed its input", ev.Name(), err)
		if err != nil || !res.Changed {
			continue
		}
		// And the other way round: what is shared stays the input's even
		// when the result is changed afterwards by the next event.
		next, err := machine.Apply(res.Checkpoint, machine.Renew{Cycle: 1, Holder: "h", ExpiresAt: t0.Add(3 * time.Hour)}, t0.Add(2*time.Second))
		if err == nil && next.Changed {
			require.Equal(t, before, cp, "%s then renew changed the first input", ev.Name())
		}
	}
}

// BenchmarkApply is a claim and a decision on a checkpoint with a history
// and a review, as at REVIEW: what sagad applies at every phase.
func BenchmarkApply(b *testing.B) {
	cp := full()
	cp.State.Status = capsule.InProgress
	cp.State.Pause = nil
	cp.State.Phase, cp.State.PhaseName = capsule.ReviewPhase, capsule.ReviewPhase.String()
	for i := range 6 {
		cp.History = append(cp.History, capsule.Transition{Phase: capsule.Phase(i), Cycle: 1, Outcome: capsule.OutcomePassed, At: t0})
	}
	claim := machine.Claim{Phase: capsule.ReviewPhase, Cycle: 1, Holder: "h2", ExpiresAt: t0.Add(time.Hour)}
	decide := machine.Decide{Phase: capsule.ReviewPhase, Cycle: 1, Holder: "h2", Claimed: true, Decision: machine.AdvanceWith()}
	b.ReportAllocs()
	for b.Loop() {
		r, err := machine.Apply(cp, claim, t0.Add(2*time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := machine.Apply(r.Checkpoint, decide, t0.Add(2*time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyRun applies a valid capsule's seven decisions, RECEPTION to
// HANDOFF, each to the result of the one before: the history grown as
// sagad grows it.
func BenchmarkApplyRun(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		cp := at(capsule.InProgress, capsule.Reception, 0)
		cp.History = []capsule.Transition{}
		for i := range capsule.NumPhases {
			st := cp.State
			r, err := machine.Apply(cp, machine.Decide{Phase: st.Phase, Cycle: st.Cycle, Decision: machine.AdvanceWith()}, t0.Add(time.Duration(i)*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			cp = r.Checkpoint
		}
	}
}
