package machine_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// at returns a checkpoint in state st at (ph, cycle).
func at(st capsule.State, ph capsule.Phase, cycle int) *capsule.Checkpoint {
	cp := &capsule.Checkpoint{
		SchemaVersion: capsule.CheckpointSchemaVersion, CapsuleID: "k", Key: "k", TraceID: "t",
		CreatedAt: t0, UpdatedAt: t0,
		State: capsule.CheckpointState{Phase: ph, PhaseName: ph.String(), Cycle: cycle, Status: st, LocksHeld: []string{}, ArtifactRefs: []string{}},
	}
	return cp
}

func paused(trigger capsule.Trigger, token string) *capsule.Checkpoint {
	cp := at(capsule.Paused, capsule.Execution, 1)
	cp.State.Pause = &capsule.PauseInfo{Trigger: trigger, Reason: "r", By: "x", At: t0, ResumeToken: token}
	return cp
}

func waiting() *capsule.Checkpoint {
	cp := at(capsule.WaitingForOperator, capsule.Handoff, 1)
	cp.State.Pause = &capsule.PauseInfo{Trigger: capsule.TriggerOperatorGate, At: t0}
	cp.State.Reviews = []capsule.ReviewEntry{{Cycle: 1, ReviewerID: "rv", Verdict: capsule.Approved, Findings: []capsule.Finding{{Message: "fine"}}}}
	return cp
}

func ended(st capsule.State) *capsule.Checkpoint {
	cp := at(st, capsule.Execution, 1)
	cp.History = []capsule.Transition{{Phase: capsule.Execution, Cycle: 1, Outcome: capsule.OutcomeHalted}}
	return cp
}

// Hashes of completion tokens: the awaited call's, and another's.
var (
	rightHash = strings.Repeat("a1", 32)
	wrongHash = strings.Repeat("b2", 32)
)

func awaiting() *capsule.Checkpoint {
	cp := paused(capsule.TriggerBlockedExternal, "")
	cp.State.AwaitingCycle = 1
	cp.State.AwaitingTokenHash = rightHash
	return cp
}

// eventTypes is how many event types [machine.Apply] knows: Decide, Claim,
// Renew, RequestResume, Resume, Pause, End, Revise, Reject, RecordResult,
// RecordAttempt, Replay, Ask and Answer. A new event raises it, and the
// table below must then say what the event does in every state.
const eventTypes = 14

// TestEveryStateAndEvent applies every event to a checkpoint in every state
// and checks whether it applies, changes nothing, or is refused — and how.
func TestEveryStateAndEvent(t *testing.T) {
	t.Parallel()
	states := map[string]func() *capsule.Checkpoint{
		"in_progress@EXECUTION/1": func() *capsule.Checkpoint { return at(capsule.InProgress, capsule.Execution, 1) },
		"in_progress/claimed": func() *capsule.Checkpoint {
			cp := at(capsule.InProgress, capsule.Execution, 1)
			cp.State.Execution = &capsule.ExecutionClaim{Cycle: 1, Holder: "h", ExpiresAt: t0.Add(time.Minute)}
			return cp
		},
		"paused/operator_manual":   func() *capsule.Checkpoint { return paused(capsule.TriggerOperatorManual, "") },
		"paused/lock_contention":   func() *capsule.Checkpoint { return paused(capsule.TriggerLockContention, "") },
		"paused/resume_in_flight":  func() *capsule.Checkpoint { return paused(capsule.TriggerOperatorManual, "tok") },
		"paused/awaiting_external": awaiting,
		"paused/agent_query":       askedAt,
		"waiting/dependencies": func() *capsule.Checkpoint {
			cp := at(capsule.Waiting, capsule.AutomatedGates, 0)
			cp.State.Pause = &capsule.PauseInfo{Trigger: capsule.TriggerDependencies, At: t0}
			cp.State.WaitingFor = []string{"dep"}
			return cp
		},
		"waiting_for_operator": waiting,
		"completed":            func() *capsule.Checkpoint { return ended(capsule.Completed) },
		"halted":               func() *capsule.Checkpoint { return ended(capsule.Halted) },
		"cancelled":            func() *capsule.Checkpoint { return ended(capsule.Cancelled) },
	}
	pausedAt := t0
	events := map[string]machine.Event{
		"decide":        machine.Decide{Phase: capsule.Execution, Cycle: 1, Decision: machine.AdvanceWith()},
		"claim":         machine.Claim{Phase: capsule.Execution, Cycle: 1, Holder: "h", ExpiresAt: t0.Add(time.Minute)},
		"renew":         machine.Renew{Cycle: 1, Holder: "h", ExpiresAt: t0.Add(2 * time.Minute)},
		"resume":        machine.RequestResume{Action: "resume", From: capsule.Paused, Token: "new"},
		"accept":        machine.RequestResume{Action: "accept", From: capsule.WaitingForOperator, Token: "new"},
		"flip":          machine.Resume{Token: "tok"},
		"flip_at":       machine.Resume{Token: "tok", At: &machine.Position{Phase: capsule.Execution, Cycle: 1}},
		"pause":         machine.Pause{Reason: "r", By: "op"},
		"cancel":        machine.End{State: capsule.Cancelled, Detail: "cancelled"},
		"halt_overdue":  machine.End{State: capsule.Halted, Detail: "executor_failed:late", IfPausedAt: &pausedAt},
		"revise":        machine.Revise{Rationale: "again", By: "op", CycleLimit: 3},
		"record_result": machine.RecordResult{Cycle: 1, Result: capsule.ExecutionResult{Cycle: 1, ArtifactRef: "a"}, TokenHash: rightHash},
		"forged":        machine.RecordResult{Cycle: 1, Result: capsule.ExecutionResult{Cycle: 1, ArtifactRef: "a"}, TokenHash: wrongHash},
		"replay":        machine.Replay{Token: "rp", By: "op"},
		"reject":        machine.Reject{Rationale: "no", By: "op"},
		"record_attempt": machine.RecordAttempt{Cycle: 1, Holder: "h", Attempt: 1,
			Failure: capsule.AttemptFailure{ExitCode: 1, Error: "exit status 1"}},
		"ask":    machine.Ask{Phase: capsule.Execution, Cycle: 1, Holder: "h", Query: capsule.AgentQuery{ID: "q2", ReplySubject: "_INBOX.q2", Prompt: "and?"}},
		"answer": machine.Answer{Text: "yes", By: "op"},
	}
	// want: "ok" (applies with a change), "noop" (applies, nothing to
	// write), or the refusal kind.
	const ok, noop = "ok", "noop"
	stale, lost, ref, unauth := machine.ErrStale, machine.ErrClaimLost, machine.ErrRefused, machine.ErrUnauthenticated
	want := map[string]map[string]any{
		// Only the claim's holder renews it or records a failed attempt;
		// a decision from a delivery without the claim is stale.
		"in_progress/claimed":      {"decide": stale, "claim": ok, "renew": ok, "resume": ref, "accept": ref, "flip": noop, "flip_at": noop, "pause": ok, "cancel": ok, "halt_overdue": ref, "reject": ref, "revise": ref, "record_result": noop, "forged": noop, "record_attempt": ok, "replay": ref, "ask": ok, "answer": ref},
		"in_progress@EXECUTION/1":  {"decide": ok, "claim": ok, "renew": lost, "resume": ref, "accept": ref, "flip": noop, "flip_at": noop, "pause": ok, "cancel": ok, "halt_overdue": ref, "reject": ref, "revise": ref, "record_result": noop, "forged": noop, "record_attempt": lost, "replay": ref, "ask": lost, "answer": ref},
		"paused/operator_manual":   {"decide": ok, "claim": stale, "renew": lost, "resume": ok, "accept": ref, "flip": noop, "flip_at": stale, "pause": noop, "cancel": ok, "halt_overdue": ref, "reject": ref, "revise": ref, "record_result": noop, "forged": noop, "record_attempt": stale, "replay": ref, "ask": stale, "answer": ref},
		"paused/lock_contention":   {"decide": stale, "claim": stale, "renew": lost, "resume": ok, "accept": ref, "flip": noop, "flip_at": stale, "pause": ok, "cancel": ok, "halt_overdue": ref, "reject": ref, "revise": ref, "record_result": noop, "forged": noop, "record_attempt": stale, "replay": ref, "ask": stale, "answer": ref},
		"paused/resume_in_flight":  {"decide": ok, "claim": stale, "renew": lost, "resume": ok, "accept": ref, "flip": ok, "flip_at": ok, "pause": noop, "cancel": ok, "halt_overdue": ref, "reject": ref, "revise": ref, "record_result": noop, "forged": noop, "record_attempt": stale, "replay": ref, "ask": stale, "answer": ref},
		"waiting/dependencies":     {"decide": stale, "claim": stale, "renew": lost, "resume": ref, "accept": ref, "flip": noop, "flip_at": stale, "pause": ref, "cancel": ok, "halt_overdue": ref, "reject": ref, "revise": ref, "record_result": noop, "forged": noop, "record_attempt": stale, "replay": ref, "ask": stale, "answer": ref},
		"paused/awaiting_external": {"decide": stale, "claim": stale, "renew": lost, "resume": ref, "accept": ref, "flip": noop, "flip_at": stale, "pause": ok, "cancel": ok, "halt_overdue": ok, "reject": ref, "revise": ref, "record_result": ok, "forged": unauth, "record_attempt": stale, "replay": ref, "ask": stale, "answer": ref},
		"waiting_for_operator":     {"decide": stale, "claim": stale, "renew": lost, "resume": ref, "accept": ok, "flip": noop, "flip_at": stale, "pause": ref, "cancel": ok, "halt_overdue": ref, "reject": ok, "revise": ok, "record_result": noop, "forged": noop, "record_attempt": stale, "replay": ref, "ask": stale, "answer": ref},
		"completed":                {"decide": stale, "claim": stale, "renew": lost, "resume": ref, "accept": ref, "flip": noop, "flip_at": stale, "pause": ref, "cancel": ref, "halt_overdue": ref, "reject": ref, "revise": ref, "record_result": noop, "forged": noop, "record_attempt": stale, "replay": ref, "ask": stale, "answer": ref},
		"halted":                   {"decide": stale, "claim": stale, "renew": lost, "resume": ref, "accept": ref, "flip": noop, "flip_at": stale, "pause": ref, "cancel": ref, "halt_overdue": ref, "reject": ref, "revise": ref, "record_result": noop, "forged": noop, "record_attempt": stale, "replay": ok, "ask": stale, "answer": ref},
		// The call goes on while its agent's question waits: its holder
		// still renews, records a failed attempt, asks again; a person
		// answers or cancels, never resumes or pauses it.
		"paused/agent_query": {"decide": stale, "claim": ok, "renew": ok, "resume": ref, "accept": ref, "flip": noop, "flip_at": stale, "pause": ref, "cancel": ok, "halt_overdue": ref, "reject": ref, "revise": ref, "record_result": noop, "forged": noop, "record_attempt": ok, "replay": ref, "ask": ok, "answer": ok},
		"cancelled":          {"decide": stale, "claim": stale, "renew": lost, "resume": ref, "accept": ref, "flip": noop, "flip_at": stale, "pause": ref, "cancel": noop, "halt_overdue": ref, "reject": ref, "revise": ref, "record_result": noop, "forged": noop, "record_attempt": stale, "replay": ok, "ask": stale, "answer": ref},
	}
	require.Len(t, want, len(states), "an expectation row per state")
	kinds := map[string]bool{}
	for _, ev := range events {
		kinds[fmt.Sprintf("%T", ev)] = true
	}
	require.Len(t, kinds, eventTypes, "every event type of the machine is applied in every state")
	for sname, mk := range states {
		require.Len(t, want[sname], len(events), "an expectation per event in %s", sname)
		for ename, ev := range events {
			w, okw := want[sname][ename]
			require.True(t, okw, "no expectation for %s × %s", sname, ename)
			t.Run(sname+"×"+ename, func(t *testing.T) {
				cp := mk()
				before := cp.Clone()
				res, err := machine.Apply(cp, ev, t0.Add(time.Second))
				// Deeply: Apply copies only what it changes, and the
				// checkpoint it was given may be a cached one.
				require.Equal(t, before, cp, "Apply never changes its input, applied or refused")
				switch w {
				case ok:
					require.NoError(t, err)
					require.True(t, res.Changed)
					require.NotSame(t, cp, res.Checkpoint)
				case noop:
					require.NoError(t, err)
					require.False(t, res.Changed)
					require.Same(t, cp, res.Checkpoint)
				default:
					require.ErrorIs(t, err, w.(error))
					var r *machine.Refusal
					require.True(t, errors.As(err, &r), "typed refusal")
					require.Equal(t, "k", r.Key)
					require.Equal(t, cp.State.Status, r.State)
				}
			})
		}
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Minute)
	tests := []struct {
		name    string
		cp      func() *capsule.Checkpoint
		ev      machine.Decide
		check   func(t *testing.T, res machine.Result)
		wantErr error
	}{
		{
			name: "advance moves to the next phase with progress",
			cp:   func() *capsule.Checkpoint { return at(capsule.InProgress, capsule.RealityAnchor, 0) },
			ev:   machine.Decide{Phase: capsule.RealityAnchor, Decision: machine.AdvanceWith()},
			check: func(t *testing.T, res machine.Result) {
				st := res.Checkpoint.State
				require.Equal(t, capsule.Planning, st.Phase)
				require.Equal(t, "PLANNING", st.PhaseName)
				require.Equal(t, capsule.RealityAnchor.Progress(), st.Progress)
				require.Equal(t, capsule.OutcomePassed, res.Transition.Outcome)
				require.Equal(t, &machine.Position{Phase: capsule.Planning}, res.Effects.Next)
				require.Equal(t, now, res.Checkpoint.UpdatedAt)
				require.Len(t, res.Checkpoint.History, 1)
			},
		},
		{
			name: "AUTOMATED_GATES starts cycle 1",
			cp:   func() *capsule.Checkpoint { return at(capsule.InProgress, capsule.AutomatedGates, 0) },
			ev:   machine.Decide{Phase: capsule.AutomatedGates, Decision: machine.AdvanceWith()},
			check: func(t *testing.T, res machine.Result) {
				require.Equal(t, capsule.Execution, res.Checkpoint.State.Phase)
				require.Equal(t, 1, res.Checkpoint.State.Cycle)
				require.Equal(t, &machine.Position{Phase: capsule.Execution, Cycle: 1}, res.Effects.Next)
			},
		},
		{
			name: "HANDOFF completes",
			cp:   func() *capsule.Checkpoint { return at(capsule.InProgress, capsule.Handoff, 2) },
			ev:   machine.Decide{Phase: capsule.Handoff, Cycle: 2, Decision: machine.AdvanceWith()},
			check: func(t *testing.T, res machine.Result) {
				require.Equal(t, capsule.Completed, res.Checkpoint.State.Status)
				require.Equal(t, 100, res.Checkpoint.State.Progress)
				require.Equal(t, capsule.Completed, res.Effects.Outcome)
				require.Nil(t, res.Effects.Next)
			},
		},
		{
			name: "REVIEW loops back to a new EXECUTION cycle",
			cp:   func() *capsule.Checkpoint { return at(capsule.InProgress, capsule.ReviewPhase, 1) },
			ev:   machine.Decide{Phase: capsule.ReviewPhase, Cycle: 1, Decision: machine.Decision{Action: machine.LoopBack}},
			check: func(t *testing.T, res machine.Result) {
				require.Equal(t, capsule.Execution, res.Checkpoint.State.Phase)
				require.Equal(t, 2, res.Checkpoint.State.Cycle)
				require.Equal(t, &machine.Position{Phase: capsule.Execution, Cycle: 2}, res.Effects.Next)
			},
		},
		{
			name: "EXECUTION halts, releases its locks and sends the outcome",
			cp: func() *capsule.Checkpoint {
				cp := at(capsule.InProgress, capsule.Execution, 1)
				cp.State.LocksHeld = []string{"a"}
				return cp
			},
			ev: machine.Decide{Phase: capsule.Execution, Cycle: 1, Decision: machine.HaltWith(capsule.ExecutorFailed("boom"))},
			check: func(t *testing.T, res machine.Result) {
				st := res.Checkpoint.State
				require.Equal(t, capsule.Halted, st.Status)
				require.Equal(t, "executor_failed:boom", st.HaltReason)
				require.Empty(t, st.LocksHeld)
				require.True(t, res.Effects.ReleaseLocks)
				require.Equal(t, capsule.Halted, res.Effects.Outcome)
			},
		},
		{
			name: "a park records no transition and writes a continuation",
			cp:   func() *capsule.Checkpoint { return at(capsule.InProgress, capsule.Execution, 1) },
			ev:   machine.Decide{Phase: capsule.Execution, Cycle: 1, Decision: machine.ParkWith(capsule.TriggerLockContention, "held")},
			check: func(t *testing.T, res machine.Result) {
				require.Nil(t, res.Transition)
				require.Equal(t, capsule.Paused, res.Checkpoint.State.Status)
				require.Equal(t, capsule.TriggerLockContention, res.Checkpoint.State.Pause.Trigger)
				require.True(t, res.Effects.Parked)
				require.True(t, res.Effects.ReleaseLocks)
			},
		},
		{
			name: "an operator's pause stands over a warning park",
			cp: func() *capsule.Checkpoint {
				cp := at(capsule.InProgress, capsule.Execution, 1)
				cp.State.Status = capsule.Paused
				cp.State.Pause = &capsule.PauseInfo{Trigger: capsule.TriggerOperatorManual, By: "op", At: t0}
				return cp
			},
			ev: machine.Decide{Phase: capsule.Execution, Cycle: 1, Decision: machine.Decision{Action: machine.Advance, Trigger: capsule.TriggerBudgetWarning}},
			check: func(t *testing.T, res machine.Result) {
				st := res.Checkpoint.State
				require.Equal(t, capsule.ReviewPhase, st.Phase)
				require.Equal(t, capsule.Paused, st.Status)
				require.Equal(t, capsule.TriggerOperatorManual, st.Pause.Trigger)
				require.Nil(t, res.Effects.Next, "paused: no phase message")
			},
		},
		{
			name: "a warning parks after the transition, once",
			cp:   func() *capsule.Checkpoint { return at(capsule.InProgress, capsule.Execution, 1) },
			ev: machine.Decide{Phase: capsule.Execution, Cycle: 1, Decision: machine.Decision{
				Action: machine.Advance, Trigger: capsule.TriggerBudgetWarning, Reason: "80%",
				Record: &machine.Record{Warned: capsule.TriggerBudgetWarning},
			}},
			check: func(t *testing.T, res machine.Result) {
				st := res.Checkpoint.State
				require.Equal(t, capsule.Paused, st.Status)
				require.Equal(t, []capsule.Trigger{capsule.TriggerBudgetWarning}, st.Warned)
				require.True(t, res.Effects.Parked)
			},
		},
		{
			name: "REVIEW's gate waits for the operator",
			cp:   func() *capsule.Checkpoint { return at(capsule.InProgress, capsule.ReviewPhase, 1) },
			ev:   machine.Decide{Phase: capsule.ReviewPhase, Cycle: 1, Decision: machine.Decision{Action: machine.Advance, Wait: true}},
			check: func(t *testing.T, res machine.Result) {
				st := res.Checkpoint.State
				require.Equal(t, capsule.WaitingForOperator, st.Status)
				require.Equal(t, capsule.TriggerOperatorGate, st.Pause.Trigger)
				require.True(t, res.Effects.Parked)
			},
		},
		{
			name: "a record is applied with the transition",
			cp:   func() *capsule.Checkpoint { return at(capsule.InProgress, capsule.Execution, 1) },
			ev: machine.Decide{Phase: capsule.Execution, Cycle: 1, Decision: machine.Decision{Action: machine.Advance, Record: &machine.Record{
				BudgetUsed: &capsule.Usage{Tokens: 5}, Result: &capsule.ExecutionResult{Cycle: 1, ArtifactRef: "artifact:k/1"},
			}}},
			check: func(t *testing.T, res machine.Result) {
				st := res.Checkpoint.State
				require.Equal(t, int64(5), st.BudgetUsed.Tokens)
				require.Equal(t, []string{"artifact:k/1"}, st.ArtifactRefs)
				require.Equal(t, 1, st.Result.Cycle)
			},
		},
		{
			name: "EXECUTION's advance takes REVIEW's claim with the same write",
			cp: func() *capsule.Checkpoint {
				cp := at(capsule.InProgress, capsule.Execution, 1)
				cp.State.Execution = &capsule.ExecutionClaim{Cycle: 1, Holder: "exec", ExpiresAt: now.Add(time.Minute), CallTokenHash: "h"}
				return cp
			},
			ev: machine.Decide{Phase: capsule.Execution, Cycle: 1, Decision: machine.AdvanceWith(), Holder: "exec", Claimed: true,
				Then: &machine.Claim{Phase: capsule.ReviewPhase, Cycle: 1, Holder: "review", ExpiresAt: now.Add(15 * time.Second)}},
			check: func(t *testing.T, res machine.Result) {
				st := res.Checkpoint.State
				require.Equal(t, capsule.ReviewPhase, st.Phase)
				require.Equal(t, &capsule.ExecutionClaim{Cycle: 1, Holder: "review", ExpiresAt: now.Add(15 * time.Second)}, st.Execution)
				require.Equal(t, capsule.OutcomePassed, res.Transition.Outcome)
			},
		},
		{
			name: "no claim is taken for a REVIEW a person paused, or a capsule parked or ended",
			cp: func() *capsule.Checkpoint {
				cp := at(capsule.InProgress, capsule.Execution, 1)
				cp.State.Status = capsule.Paused
				cp.State.Pause = &capsule.PauseInfo{Trigger: capsule.TriggerOperatorManual, By: "op", At: t0}
				return cp
			},
			ev: machine.Decide{Phase: capsule.Execution, Cycle: 1, Decision: machine.AdvanceWith(),
				Then: &machine.Claim{Phase: capsule.ReviewPhase, Cycle: 1, Holder: "review", ExpiresAt: now.Add(15 * time.Second)}},
			check: func(t *testing.T, res machine.Result) {
				require.Equal(t, capsule.Paused, res.Checkpoint.State.Status)
				require.Nil(t, res.Checkpoint.State.Execution)
			},
		},
		{
			name: "no claim is taken for a warning park or a halt",
			cp:   func() *capsule.Checkpoint { return at(capsule.InProgress, capsule.Execution, 1) },
			ev: machine.Decide{Phase: capsule.Execution, Cycle: 1, Decision: machine.Decision{Action: machine.Advance, Trigger: capsule.TriggerBudgetWarning},
				Then: &machine.Claim{Phase: capsule.ReviewPhase, Cycle: 1, Holder: "review", ExpiresAt: now.Add(15 * time.Second)}},
			check: func(t *testing.T, res machine.Result) {
				require.Equal(t, capsule.Paused, res.Checkpoint.State.Status)
				require.Nil(t, res.Checkpoint.State.Execution)
			},
		},
		{
			name: "a claim on another phase or cycle than the one the decision leads to is not taken",
			cp:   func() *capsule.Checkpoint { return at(capsule.InProgress, capsule.Execution, 1) },
			ev: machine.Decide{Phase: capsule.Execution, Cycle: 1, Decision: machine.AdvanceWith(),
				Then: &machine.Claim{Phase: capsule.ReviewPhase, Cycle: 2, Holder: "review", ExpiresAt: now.Add(15 * time.Second)}},
			check: func(t *testing.T, res machine.Result) {
				require.Equal(t, capsule.ReviewPhase, res.Checkpoint.State.Phase)
				require.Nil(t, res.Checkpoint.State.Execution)
			},
		},
		{
			name:    "another phase's message is stale",
			cp:      func() *capsule.Checkpoint { return at(capsule.InProgress, capsule.ReviewPhase, 1) },
			ev:      machine.Decide{Phase: capsule.Execution, Cycle: 1, Decision: machine.AdvanceWith()},
			wantErr: machine.ErrStale,
		},
		{
			name:    "an earlier cycle is stale",
			cp:      func() *capsule.Checkpoint { return at(capsule.InProgress, capsule.Execution, 2) },
			ev:      machine.Decide{Phase: capsule.Execution, Cycle: 1, Decision: machine.AdvanceWith()},
			wantErr: machine.ErrStale,
		},
		{
			name: "a live claim of another delivery makes it stale",
			cp: func() *capsule.Checkpoint {
				cp := at(capsule.InProgress, capsule.Execution, 1)
				cp.State.Execution = &capsule.ExecutionClaim{Cycle: 1, Holder: "other", ExpiresAt: now.Add(time.Minute)}
				return cp
			},
			ev:      machine.Decide{Phase: capsule.Execution, Cycle: 1, Holder: "me", Decision: machine.AdvanceWith()},
			wantErr: machine.ErrStale,
		},
		{
			name: "a lapsed claim of another delivery does not",
			cp: func() *capsule.Checkpoint {
				cp := at(capsule.InProgress, capsule.Execution, 1)
				cp.State.Execution = &capsule.ExecutionClaim{Cycle: 1, Holder: "other", ExpiresAt: now.Add(-time.Second)}
				return cp
			},
			ev: machine.Decide{Phase: capsule.Execution, Cycle: 1, Holder: "me", Decision: machine.AdvanceWith()},
			check: func(t *testing.T, res machine.Result) {
				require.Nil(t, res.Checkpoint.State.Execution, "the transition ends the claim")
			},
		},
		{
			name:    "a claimed delivery whose claim was cleared is stale",
			cp:      func() *capsule.Checkpoint { return at(capsule.InProgress, capsule.Execution, 1) },
			ev:      machine.Decide{Phase: capsule.Execution, Cycle: 1, Holder: "me", Claimed: true, Decision: machine.AdvanceWith()},
			wantErr: machine.ErrStale,
		},
		{
			name:    "a retry records nothing",
			cp:      func() *capsule.Checkpoint { return at(capsule.InProgress, capsule.Execution, 1) },
			ev:      machine.Decide{Phase: capsule.Execution, Cycle: 1, Decision: machine.RetryAfter(time.Second, nil)},
			wantErr: machine.ErrInvalid,
		},
		{
			name:    "only REVIEW loops back",
			cp:      func() *capsule.Checkpoint { return at(capsule.InProgress, capsule.Planning, 0) },
			ev:      machine.Decide{Phase: capsule.Planning, Decision: machine.Decision{Action: machine.LoopBack}},
			wantErr: machine.ErrInvalid,
		},
		{
			name:    "a halt needs a reason",
			cp:      func() *capsule.Checkpoint { return at(capsule.InProgress, capsule.Planning, 0) },
			ev:      machine.Decide{Phase: capsule.Planning, Decision: machine.Decision{Action: machine.Halt}},
			wantErr: machine.ErrInvalid,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, err := machine.Apply(tt.cp(), tt.ev, now)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.True(t, res.Changed)
			tt.check(t, res)
		})
	}
}

func TestClaimAndRenew(t *testing.T) {
	t.Parallel()
	cp := at(capsule.InProgress, capsule.Execution, 1)
	res, err := machine.Apply(cp, machine.Claim{Phase: capsule.Execution, Cycle: 1, Holder: "a", ExpiresAt: t0.Add(time.Minute), Locks: []string{"x"}}, t0)
	require.NoError(t, err)
	require.Equal(t, []string{"x"}, res.Checkpoint.State.LocksHeld)
	require.Equal(t, t0, res.Checkpoint.UpdatedAt, "a claim is not a state change people see")

	_, err = machine.Apply(res.Checkpoint, machine.Claim{Phase: capsule.Execution, Cycle: 1, Holder: "b", ExpiresAt: t0.Add(time.Minute)}, t0.Add(time.Second))
	require.ErrorIs(t, err, machine.ErrClaimHeld)
	taken, err := machine.Apply(res.Checkpoint, machine.Claim{Phase: capsule.Execution, Cycle: 1, Holder: "b", ExpiresAt: t0.Add(3 * time.Minute)}, t0.Add(2*time.Minute))
	require.NoError(t, err, "a lapsed claim is taken over")
	require.Equal(t, "b", taken.Checkpoint.State.Execution.Holder)

	_, err = machine.Apply(taken.Checkpoint, machine.Renew{Cycle: 1, Holder: "a", ExpiresAt: t0.Add(time.Hour)}, t0)
	require.ErrorIs(t, err, machine.ErrClaimLost)
	renewed, err := machine.Apply(taken.Checkpoint, machine.Renew{Cycle: 1, Holder: "b", ExpiresAt: t0.Add(time.Hour)}, t0)
	require.NoError(t, err)
	require.Equal(t, t0.Add(time.Hour), renewed.Checkpoint.State.Execution.ExpiresAt)
}

func TestResumeKeepsAResumeInFlight(t *testing.T) {
	t.Parallel()
	cp := paused(capsule.TriggerBudgetWarning, "")
	cp.State.Warned = []capsule.Trigger{capsule.TriggerBudgetWarning}
	first, err := machine.Apply(cp, machine.RequestResume{From: capsule.Paused, Token: "one", Tokens: 5000}, t0)
	require.NoError(t, err)
	require.Equal(t, "one", first.Checkpoint.State.Pause.ResumeToken)
	require.Equal(t, int64(5000), first.Checkpoint.State.Overrides.Tokens)
	require.Empty(t, first.Checkpoint.State.Warned, "raised caps re-arm the warning")
	require.False(t, first.Effects.Parked, "a resume in flight writes no continuation")

	again, err := machine.Apply(first.Checkpoint, machine.RequestResume{From: capsule.Paused, Token: "two"}, t0)
	require.NoError(t, err)
	require.Equal(t, "one", again.Checkpoint.State.Pause.ResumeToken, "the second resume finishes the first")

	flipped, err := machine.Apply(again.Checkpoint, machine.Resume{Token: "one"}, t0)
	require.NoError(t, err)
	require.Equal(t, capsule.InProgress, flipped.Checkpoint.State.Status)
	require.Nil(t, flipped.Checkpoint.State.Pause)

	_, err = machine.Apply(cp, machine.RequestResume{From: capsule.Paused, Token: "x", Dollars: -1}, t0)
	require.ErrorIs(t, err, machine.ErrInvalid)
	_, err = machine.Apply(awaiting(), machine.RequestResume{From: capsule.Paused, Token: "x"}, t0)
	require.ErrorIs(t, err, machine.ErrRefused)
	forced, err := machine.Apply(awaiting(), machine.RequestResume{From: capsule.Paused, Token: "x", Force: true}, t0)
	require.NoError(t, err)
	require.Equal(t, "x", forced.Checkpoint.State.Pause.ResumeToken)
}

// TestAwaitedCallToken: accepted work records the hash of its call's
// completion token; a result is recorded only with that hash; the next
// call's acceptance replaces it, EXECUTION's decision on the result clears it.
func TestAwaitedCallToken(t *testing.T) {
	t.Parallel()
	accept := func(hash string) machine.Decide {
		d := machine.ParkWith(capsule.TriggerBlockedExternal, "accepted")
		d.Record = &machine.Record{AwaitingCycle: 1, AwaitingTokenHash: hash}
		return machine.Decide{Phase: capsule.Execution, Cycle: 1, Decision: d}
	}
	result := func(hash string) machine.RecordResult {
		return machine.RecordResult{Cycle: 1, Result: capsule.ExecutionResult{Cycle: 1, ArtifactRef: "artifact:k/1"}, TokenHash: hash}
	}
	noHash := func() *capsule.Checkpoint { cp := awaiting(); cp.State.AwaitingTokenHash = ""; return cp }
	recorded := func() *capsule.Checkpoint {
		cp := awaiting()
		cp.State.Result = &capsule.ExecutionResult{Cycle: 1, ArtifactRef: "artifact:k/1"}
		return cp
	}
	tests := []struct {
		name    string
		cp      func() *capsule.Checkpoint
		ev      machine.Event
		wantErr error
		changed bool
		hash    string // the awaited hash after the event
		result  bool   // a result for cycle 1 stands after the event
	}{
		{name: "an acceptance records its call's hash", cp: func() *capsule.Checkpoint { return at(capsule.InProgress, capsule.Execution, 1) },
			ev: accept(rightHash), changed: true, hash: rightHash},
		{name: "a later call's acceptance replaces the hash", cp: func() *capsule.Checkpoint {
			cp := at(capsule.InProgress, capsule.Execution, 1)
			cp.State.AwaitingCycle, cp.State.AwaitingTokenHash = 1, wrongHash
			return cp
		}, ev: accept(rightHash), changed: true, hash: rightHash},
		{name: "an acceptance without a hash leaves none behind", cp: func() *capsule.Checkpoint {
			cp := at(capsule.InProgress, capsule.Execution, 1)
			cp.State.AwaitingCycle, cp.State.AwaitingTokenHash = 1, wrongHash
			return cp
		}, ev: accept(""), changed: true, hash: ""},
		{name: "the right hash records the result", cp: awaiting, ev: result(rightHash), changed: true, hash: rightHash, result: true},
		{name: "EXECUTION's decision on the recorded result clears the hash", cp: func() *capsule.Checkpoint {
			cp := recorded()
			cp.State.Status, cp.State.Pause = capsule.InProgress, nil
			return cp
		}, ev: machine.Decide{Phase: capsule.Execution, Cycle: 1, Decision: machine.Decision{Action: machine.Advance, Record: &machine.Record{
			Result: &capsule.ExecutionResult{Cycle: 1, ArtifactRef: "artifact:k/1"},
		}}}, changed: true, hash: "", result: true},
		{name: "a wrong hash is refused", cp: awaiting, ev: result(wrongHash), wantErr: machine.ErrUnauthenticated, hash: rightHash},
		{name: "no hash is refused", cp: awaiting, ev: result(""), wantErr: machine.ErrUnauthenticated, hash: rightHash},
		{name: "a hash differing in its last character is refused", cp: awaiting, ev: result(rightHash[:63] + "2"), wantErr: machine.ErrUnauthenticated, hash: rightHash},
		{name: "a checkpoint without a hash takes no result", cp: noHash, ev: result(""), wantErr: machine.ErrUnauthenticated},
		{name: "a recorded result stands, whatever the hash", cp: recorded, ev: result(wrongHash), hash: rightHash, result: true},
		{name: "a result of a cycle not awaited changes nothing", cp: func() *capsule.Checkpoint { return paused(capsule.TriggerBlockedExternal, "") },
			ev: result(rightHash)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cp := tt.cp()
			res, err := machine.Apply(cp, tt.ev, t0)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				res.Checkpoint = cp
			} else {
				require.NoError(t, err)
				require.Equal(t, tt.changed, res.Changed)
			}
			st := res.Checkpoint.State
			require.Equal(t, tt.hash, st.AwaitingTokenHash)
			require.Equal(t, tt.result, st.Result != nil && st.Result.Cycle == 1)
		})
	}
}

func TestReviseAndEnd(t *testing.T) {
	t.Parallel()
	res, err := machine.Apply(waiting(), machine.Revise{Rationale: "tighten", By: "ann", CycleLimit: 3}, t0)
	require.NoError(t, err)
	st := res.Checkpoint.State
	require.Equal(t, capsule.Execution, st.Phase)
	require.Equal(t, 2, st.Cycle)
	require.Equal(t, "ann", machine.RevisedBy(res.Checkpoint))
	require.Equal(t, &machine.Position{Phase: capsule.Execution, Cycle: 2}, res.Effects.Next)
	again, err := machine.Apply(res.Checkpoint, machine.Revise{Rationale: "tighten", By: "ann", CycleLimit: 3}, t0)
	require.NoError(t, err)
	require.False(t, again.Changed, "a recorded revision is not recorded twice")

	last, err := machine.Apply(waiting(), machine.Revise{Rationale: "no", By: "ann", CycleLimit: 1}, t0)
	require.NoError(t, err)
	require.Equal(t, "max_cycles_exceeded:1", last.Checkpoint.State.HaltReason)
	require.Equal(t, capsule.Halted, last.Effects.Outcome)

	c, err := machine.Apply(at(capsule.InProgress, capsule.Execution, 1), machine.End{State: capsule.Cancelled, Detail: "cancelled by ann"}, t0)
	require.NoError(t, err)
	require.Equal(t, capsule.Cancelled, c.Effects.Outcome)
	require.True(t, c.Effects.ReleaseLocks)
	require.Equal(t, capsule.OutcomeCancelled, c.Transition.Outcome)

	moved := t0.Add(time.Hour)
	_, err = machine.Apply(awaiting(), machine.End{State: capsule.Halted, Detail: "executor_failed:late", IfPausedAt: &moved}, t0)
	require.ErrorIs(t, err, machine.ErrRefused, "a pause newer than the one judged overdue stands")
}

func TestRefusalReadsAsASentence(t *testing.T) {
	t.Parallel()
	_, err := machine.Apply(ended(capsule.Completed), machine.End{State: capsule.Cancelled, Detail: "x"}, t0)
	require.EqualError(t, err, "cannot cancel k: the capsule is completed (it has ended)")
	var r *machine.Refusal
	require.ErrorAs(t, err, &r)
	require.Equal(t, machine.ErrRefused, r.Kind)

	tests := []struct {
		name string
		r    machine.Refusal
		want string
	}{
		{"refused without hint", machine.Refusal{Kind: machine.ErrRefused, Event: "pause", Key: "k", State: capsule.Completed},
			"cannot pause k: the capsule is completed"},
		{"claim lost", machine.Refusal{Kind: machine.ErrClaimLost, Event: "record_result", Key: "k"},
			"cannot record result k: claim on the cycle lost"},
		{"invalid, no key", machine.Refusal{Kind: machine.ErrInvalid, Event: "claim", Detail: "no checkpoint"},
			"cannot claim: invalid event: no checkpoint"},
	}
	for _, tt := range tests {
		require.EqualError(t, &tt.r, tt.want, tt.name)
	}
}

func TestReject(t *testing.T) {
	t.Parallel()
	res, err := machine.Apply(waiting(), machine.Reject{Rationale: "not this", By: "ann"}, t0)
	require.NoError(t, err)
	st := res.Checkpoint.State
	require.Equal(t, capsule.Halted, st.Status)
	require.Equal(t, "operator_rejected", st.HaltReason)
	require.Equal(t, capsule.Halted, res.Effects.Outcome)
	require.Equal(t, "operator:ann", st.Reviews[len(st.Reviews)-1].ReviewerID)
	require.Equal(t, capsule.Rejected, st.Reviews[len(st.Reviews)-1].Verdict)
	again, err := machine.Apply(res.Checkpoint, machine.Reject{Rationale: "not this", By: "ann"}, t0)
	require.NoError(t, err)
	require.False(t, again.Changed, "a recorded rejection is not recorded twice")
}

func TestWaitForDependencies(t *testing.T) {
	t.Parallel()
	cp := at(capsule.InProgress, capsule.AutomatedGates, 0)
	res, err := machine.Apply(cp, machine.Decide{Phase: capsule.AutomatedGates, Decision: machine.Decision{
		Action: machine.Park, Trigger: capsule.TriggerDependencies, Reason: "waiting for 1 of 1", WaitFor: []string{"dep"},
	}}, t0)
	require.NoError(t, err)
	st := res.Checkpoint.State
	require.Equal(t, capsule.Waiting, st.Status, "waiting, not paused")
	require.Equal(t, []string{"dep"}, st.WaitingFor)
	require.Nil(t, res.Transition, "nothing recorded in the history")
	require.True(t, res.Effects.Parked, "its record lets the sweeper find it")

	marked, err := machine.Apply(res.Checkpoint, machine.RequestResume{From: capsule.Waiting, Token: "tok"}, t0)
	require.NoError(t, err)
	flipped, err := machine.Apply(marked.Checkpoint, machine.Resume{Token: "tok", At: &machine.Position{Phase: capsule.AutomatedGates}}, t0)
	require.NoError(t, err)
	require.Equal(t, capsule.InProgress, flipped.Checkpoint.State.Status)
	require.Empty(t, flipped.Checkpoint.State.WaitingFor)

	since := t0
	halted, err := machine.Apply(res.Checkpoint, machine.End{State: capsule.Halted, Detail: "dependency_failed:dep", IfWaitingSince: &since}, t0)
	require.NoError(t, err)
	require.Equal(t, capsule.Halted, halted.Effects.Outcome)
	later := t0.Add(time.Hour)
	_, err = machine.Apply(res.Checkpoint, machine.End{State: capsule.Halted, Detail: "dependency_failed:dep", IfWaitingSince: &later}, t0)
	require.ErrorIs(t, err, machine.ErrRefused, "a newer wait is not ended by an older judgement")
}

// TestEndAbandonsTheCallInFlight: an end while a live claim's call runs
// says in history that the call is abandoned (an agent's call has no cancel
// on the wire); an end with a lapsed claim, or none, says nothing of it,
// and the halt reason stays the reason alone.
func TestEndAbandonsTheCallInFlight(t *testing.T) {
	t.Parallel()
	claimed, err := machine.Apply(at(capsule.InProgress, capsule.Execution, 2), machine.Claim{Phase: capsule.Execution, Cycle: 2, Holder: "a", ExpiresAt: t0.Add(time.Minute)}, t0)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		cp   *capsule.Checkpoint
		now  time.Time
		ev   machine.End
		says bool
	}{
		{"cancel during a call", claimed.Checkpoint, t0.Add(time.Second), machine.End{State: capsule.Cancelled, Detail: "cancelled by ann"}, true},
		{"halt during a call", claimed.Checkpoint, t0.Add(time.Second), machine.End{State: capsule.Halted, Detail: "deadline_exceeded:EXECUTION"}, true},
		{"lapsed claim", claimed.Checkpoint, t0.Add(time.Hour), machine.End{State: capsule.Cancelled, Detail: "cancelled"}, false},
		{"no claim", at(capsule.InProgress, capsule.Execution, 2), t0, machine.End{State: capsule.Cancelled, Detail: "cancelled"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := machine.Apply(tc.cp, tc.ev, tc.now)
			require.NoError(t, err)
			last := res.Checkpoint.History[len(res.Checkpoint.History)-1]
			require.Equal(t, tc.says, strings.Contains(last.Detail, "the call in flight at EXECUTION cycle 2 is abandoned"), last.Detail)
			require.True(t, strings.HasPrefix(last.Detail, tc.ev.Detail))
			if tc.ev.State == capsule.Halted {
				require.Equal(t, tc.ev.Detail, res.Checkpoint.State.HaltReason)
			}
			require.Nil(t, res.Checkpoint.State.Execution)
		})
	}
}
