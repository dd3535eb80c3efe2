package machine_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/machine"
)

// askedAt is a capsule whose EXECUTION call (claimed by "h") asked q1.
func askedAt() *capsule.Checkpoint {
	cp := at(capsule.InProgress, capsule.Execution, 1)
	cp.State.Execution = &capsule.ExecutionClaim{Cycle: 1, Holder: "h", ExpiresAt: t0.Add(time.Minute)}
	cp.State.LocksHeld = []string{"a.txt"}
	res, err := machine.Apply(cp, machine.Ask{Phase: capsule.Execution, Cycle: 1, Holder: "h",
		Query: capsule.AgentQuery{ID: "q1", ReplySubject: "_INBOX.q1", Prompt: "which licence?", Agent: "claude.ann.s1"}}, t0)
	if err != nil {
		panic(err)
	}
	return res.Checkpoint
}

func apply(t *testing.T, cp *capsule.Checkpoint, ev machine.Event, at time.Time) *capsule.Checkpoint {
	t.Helper()
	res, err := machine.Apply(cp, ev, at)
	require.NoError(t, err)
	return res.Checkpoint
}

// TestAskParksWhileTheCallRuns: a question parks the capsule with
// agent_query, keeping its claim and locks; answers close the questions one
// by one, and the last takes it back to in progress with the answer kept
// for a later attempt.
func TestAskParksWhileTheCallRuns(t *testing.T) {
	t.Parallel()
	cp := askedAt()
	st := cp.State
	require.Equal(t, capsule.Paused, st.Status)
	require.Equal(t, capsule.TriggerAgentQuery, st.Pause.Trigger)
	require.Equal(t, "claude.ann.s1 asks: which licence?", st.Pause.Reason)
	require.Equal(t, "claude.ann.s1", st.Pause.By)
	require.Equal(t, "h", st.Execution.Holder, "the call keeps its claim")
	require.Equal(t, []string{"a.txt"}, st.LocksHeld, "and its locks")
	require.Len(t, st.AgentQueries, 1)
	require.Equal(t, capsule.Execution, st.AgentQueries[0].Phase)
	require.Equal(t, t0, st.AgentQueries[0].At)
	fx := machine.EffectsOf(cp, nil)
	require.True(t, fx.Parked, "its continuation and agent_query event are written")
	require.False(t, fx.ReleaseLocks)

	// The same question again (a CAS retry) changes nothing.
	res, err := machine.Apply(cp, machine.Ask{Phase: capsule.Execution, Cycle: 1, Holder: "h",
		Query: capsule.AgentQuery{ID: "q1", ReplySubject: "_INBOX.q1", Prompt: "which licence?"}}, t0.Add(time.Second))
	require.NoError(t, err)
	require.False(t, res.Changed)

	cp = apply(t, cp, machine.Ask{Phase: capsule.Execution, Cycle: 1, Holder: "h",
		Query: capsule.AgentQuery{ID: "q2", ReplySubject: "_INBOX.q2", Prompt: "and the year?", Agent: "claude.ann.s1"}}, t0.Add(2*time.Second))
	require.Len(t, cp.State.AgentQueries, 2)
	require.Equal(t, t0, cp.State.Pause.At, "parked since the first question")

	cp = apply(t, cp, machine.Answer{Text: "MIT", By: "ann"}, t0.Add(3*time.Second))
	require.Equal(t, capsule.Paused, cp.State.Status, "one question is still open")
	require.Equal(t, "q2", cp.State.AgentQueries[0].ID)
	require.Equal(t, "claude.ann.s1 asks: and the year?", cp.State.Pause.Reason)
	require.Equal(t, "MIT", cp.State.OperatorAnswer.Text)

	_, err = machine.Apply(cp, machine.Answer{QueryID: "q1", Text: "again", By: "ann"}, t0.Add(4*time.Second))
	require.ErrorIs(t, err, machine.ErrRefused, "answered already")

	cp = apply(t, cp, machine.Answer{QueryID: "q2", Text: "2026", By: "bob"}, t0.Add(5*time.Second))
	require.Equal(t, capsule.InProgress, cp.State.Status)
	require.Nil(t, cp.State.Pause)
	require.Nil(t, cp.State.AgentQueries)
	require.Equal(t, capsule.OperatorAnswer{Text: "2026", By: "bob", At: t0.Add(5 * time.Second)}, *cp.State.OperatorAnswer)
	require.Equal(t, "h", cp.State.Execution.Holder)
}

// TestTheCallsEndClosesItsQuestions: whatever ends the call that asked —
// its decision, a failed attempt, a new claim after its holder died, a
// cancel, the deadline — closes its questions and the pause they caused.
func TestTheCallsEndClosesItsQuestions(t *testing.T) {
	t.Parallel()
	deadline := t0
	cases := map[string]struct {
		ev    machine.Event
		at    time.Time
		state capsule.State
	}{
		"decision": {machine.Decide{Phase: capsule.Execution, Cycle: 1, Holder: "h", Claimed: true, Decision: machine.AdvanceWith()},
			t0.Add(time.Second), capsule.InProgress},
		"decision to park": {machine.Decide{Phase: capsule.Execution, Cycle: 1, Holder: "h", Claimed: true,
			Decision: machine.ParkWith(capsule.TriggerBlockedExternal, "exit 11")}, t0.Add(time.Second), capsule.Paused},
		"failed attempt": {machine.RecordAttempt{Phase: capsule.Execution, Cycle: 1, Holder: "h", Attempt: 1,
			Failure: capsule.AttemptFailure{Error: "stream ended"}}, t0.Add(time.Second), capsule.InProgress},
		"claim after the holder died": {machine.Claim{Phase: capsule.Execution, Cycle: 1, Holder: "h2", ExpiresAt: t0.Add(time.Hour)},
			t0.Add(2 * time.Minute), capsule.InProgress},
		"cancel":   {machine.End{State: capsule.Cancelled, Detail: "cancelled"}, t0.Add(time.Second), capsule.Cancelled},
		"deadline": {machine.End{State: capsule.Halted, IfDeadlinePassed: &deadline}, t0.Add(time.Second), capsule.Halted},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cp := apply(t, askedAt(), c.ev, c.at)
			require.Equal(t, c.state, cp.State.Status)
			require.Nil(t, cp.State.AgentQueries)
			if cp.State.Pause != nil {
				require.NotEqual(t, capsule.TriggerAgentQuery, cp.State.Pause.Trigger)
			}
		})
	}
	// A live holder's claim is not taken over.
	_, err := machine.Apply(askedAt(), machine.Claim{Phase: capsule.Execution, Cycle: 1, Holder: "h2", ExpiresAt: t0.Add(time.Hour)}, t0.Add(time.Second))
	require.ErrorIs(t, err, machine.ErrClaimHeld)
	// The deadline halts it at the phase it stands at.
	cp := apply(t, askedAt(), machine.End{State: capsule.Halted, IfDeadlinePassed: &deadline}, t0.Add(time.Second))
	require.Equal(t, "deadline_exceeded:EXECUTION", cp.State.HaltReason)
	require.Nil(t, cp.State.Execution, "the call's claim is gone: its renewal fails and the call stops")
}

// TestAskRefusals: only the claim's holder asks, only during EXECUTION or
// REVIEW, only a question sagad may answer, and only so many at once.
func TestAskRefusals(t *testing.T) {
	t.Parallel()
	claimed := func() *capsule.Checkpoint {
		cp := at(capsule.InProgress, capsule.Execution, 1)
		cp.State.Execution = &capsule.ExecutionClaim{Cycle: 1, Holder: "h", ExpiresAt: t0.Add(time.Minute)}
		return cp
	}
	good := capsule.AgentQuery{ID: "q", ReplySubject: "_INBOX.x", Prompt: "?"}
	cases := map[string]struct {
		ev   machine.Event
		want error
	}{
		"another holder": {machine.Ask{Phase: capsule.Execution, Cycle: 1, Holder: "x", Query: good}, machine.ErrClaimLost},
		"another cycle":  {machine.Ask{Phase: capsule.Execution, Cycle: 2, Holder: "h", Query: good}, machine.ErrStale},
		"PLANNING":       {machine.Ask{Phase: capsule.Planning, Cycle: 1, Holder: "h", Query: good}, machine.ErrInvalid},
		"sagad's subject": {machine.Ask{Phase: capsule.Execution, Cycle: 1, Holder: "h",
			Query: capsule.AgentQuery{ID: "q", ReplySubject: "saga.admin.cancel", Prompt: "?"}}, machine.ErrInvalid},
		"wildcard": {machine.Ask{Phase: capsule.Execution, Cycle: 1, Holder: "h",
			Query: capsule.AgentQuery{ID: "q", ReplySubject: "_INBOX.>", Prompt: "?"}}, machine.ErrInvalid},
		"no id": {machine.Ask{Phase: capsule.Execution, Cycle: 1, Holder: "h",
			Query: capsule.AgentQuery{ReplySubject: "_INBOX.x", Prompt: "?"}}, machine.ErrInvalid},
	}
	for name, c := range cases {
		_, err := machine.Apply(claimed(), c.ev, t0)
		require.ErrorIs(t, err, c.want, name)
	}
	cp := claimed()
	for i := range capsule.MaxAgentQueries {
		cp = apply(t, cp, machine.Ask{Phase: capsule.Execution, Cycle: 1, Holder: "h",
			Query: capsule.AgentQuery{ID: fmt.Sprint(i), ReplySubject: "_INBOX.x", Prompt: "?"}}, t0)
	}
	_, err := machine.Apply(cp, machine.Ask{Phase: capsule.Execution, Cycle: 1, Holder: "h",
		Query: capsule.AgentQuery{ID: "more", ReplySubject: "_INBOX.x", Prompt: "?"}}, t0)
	require.ErrorIs(t, err, machine.ErrRefused)
	// A long question is cut, at a rune.
	cp = at(capsule.InProgress, capsule.ReviewPhase, 1)
	cp.State.Execution = &capsule.ExecutionClaim{Cycle: 1, Holder: "h", ExpiresAt: t0.Add(time.Minute)}
	cp = apply(t, cp, machine.Ask{Phase: capsule.ReviewPhase, Cycle: 1, Holder: "h",
		Query: capsule.AgentQuery{ID: "long", ReplySubject: "_INBOX.x", Prompt: strings.Repeat("é", capsule.MaxQueryPrompt)}}, t0)
	require.LessOrEqual(t, len(cp.State.AgentQueries[0].Prompt), capsule.MaxQueryPrompt)
	require.True(t, strings.HasSuffix(cp.State.AgentQueries[0].Prompt, "é"))
}
