package machine

import (
	"fmt"
	"strings"
	"time"

	"github.com/sagad/sagad/capsule"
)

// Ask records a question the agent of the running call on (Phase, Cycle)
// asked a person, and parks the capsule with trigger agent_query while the
// call goes on. Only the holder of the cycle's claim may ask; a question
// already recorded (same id) changes nothing, so a CAS retry is harmless.
type Ask struct {
	Phase  capsule.Phase
	Cycle  int
	Holder string
	// Query is the question; it must have passed capsule.AgentQuery.Check.
	Query capsule.AgentQuery
}

// Answer records a person's answer to the open question QueryID (the
// oldest when empty): the question is closed, the answer becomes the
// checkpoint's OperatorAnswer (so a later attempt carries it, should this
// call end unanswered), and once no question is open the capsule is in
// progress again. Whoever applies it publishes Text to the question's reply
// subject.
type Answer struct {
	QueryID string
	Text    string
	By      string
}

// Name implements Event.
func (Ask) Name() string { return "ask" }

// Name implements Event.
func (Answer) Name() string { return "answer" }

// Running reports whether the phase ph of cycle is still at work on cp: in
// progress there, or parked there by a trigger during which the call goes
// on (agent_query).
func Running(cp *capsule.Checkpoint, ph capsule.Phase, cycle int) bool {
	return Current(cp, ph, cycle) || callParkedAt(cp, ph, cycle)
}

// callParkedAt reports whether cp is parked at (ph, cycle) by a trigger
// during which the phase's call goes on.
func callParkedAt(cp *capsule.Checkpoint, ph capsule.Phase, cycle int) bool {
	st := cp.State
	return st.Status == capsule.Paused && st.Phase == ph && st.Cycle == cycle && st.Pause != nil &&
		st.Pause.Trigger.Info().CallRuns
}

// callEnded takes a capsule parked while its call ran back to in progress
// and closes the call's open questions: the call that asked them ended (or
// its holder died), and nobody is left to hear their answers.
func callEnded(st *capsule.CheckpointState) {
	if st.Status == capsule.Paused && st.Pause != nil && st.Pause.Trigger.Info().CallRuns {
		st.Status = capsule.InProgress
		st.Pause = nil
	}
	st.AgentQueries = nil
}

func ask(cp *capsule.Checkpoint, e Ask, now time.Time) (bool, error) {
	st := &cp.State
	if e.Phase != capsule.Execution && e.Phase != capsule.ReviewPhase {
		return false, refuse(ErrInvalid, e, cp, fmt.Sprintf("only EXECUTION and REVIEW call agents, not %s", e.Phase))
	}
	q := e.Query
	if err := q.Check(); err != nil {
		return false, refuse(ErrInvalid, e, cp, err.Error())
	}
	if !Running(cp, e.Phase, e.Cycle) {
		return false, refuse(ErrStale, e, cp, fmt.Sprintf("%s cycle %d", e.Phase, e.Cycle))
	}
	if ex := st.Execution; ex == nil || ex.Cycle != e.Cycle || ex.Holder != e.Holder {
		return false, refuse(ErrClaimLost, e, cp, "")
	}
	if _, open := st.OpenQuery(q.ID); open {
		return false, nil
	}
	if len(st.AgentQueries) >= capsule.MaxAgentQueries {
		return false, refused(e, cp, fmt.Sprintf("%d questions of its call are open already", capsule.MaxAgentQueries))
	}
	q.Phase, q.Cycle, q.At = e.Phase, e.Cycle, q.At.UTC()
	if q.At.IsZero() {
		q.At = now
	}
	st.AgentQueries = append(st.AgentQueries, q)
	if st.Status == capsule.InProgress {
		park(st, capsule.TriggerAgentQuery, QueryReason(q), q.Agent, now)
	}
	return true, nil
}

// QueryReason is the pause reason of a question: who asks what, cut to a
// line.
func QueryReason(q capsule.AgentQuery) string {
	p := strings.Join(strings.Fields(q.Prompt), " ")
	if len(p) > 200 {
		cut := 200
		for cut > 0 && p[cut]&0xC0 == 0x80 {
			cut--
		}
		p = p[:cut] + "…"
	}
	who := q.Agent
	if who == "" {
		who = "the agent"
	}
	return who + " asks: " + p
}

func answer(cp *capsule.Checkpoint, e Answer, now time.Time) (bool, error) {
	st := &cp.State
	if strings.TrimSpace(e.Text) == "" {
		return false, refuse(ErrInvalid, e, cp, "an empty answer")
	}
	q, open := st.OpenQuery(e.QueryID)
	if !open {
		hint := "no question of its agent is open"
		if e.QueryID != "" {
			hint = "no open question has id " + e.QueryID
		}
		return false, refused(e, cp, hint)
	}
	rest := make([]capsule.AgentQuery, 0, len(st.AgentQueries)-1)
	for _, x := range st.AgentQueries {
		if x.ID != q.ID {
			rest = append(rest, x)
		}
	}
	st.AgentQueries = rest
	if len(rest) > 0 && st.Pause != nil {
		pause := *st.Pause // shared with Apply's input
		pause.Reason = QueryReason(rest[0])
		st.Pause = &pause
	}
	if len(rest) == 0 {
		st.AgentQueries = nil
		if callParkedAt(cp, st.Phase, st.Cycle) {
			st.Status = capsule.InProgress
			st.Pause = nil
		}
	}
	answer := capsule.OperatorAnswer{Text: e.Text, By: e.By, At: now}
	st.OperatorAnswer = &answer
	// An agent's answered question is on the record like a resume's answer.
	st.RecordAnswer(answer)
	return true, nil
}
