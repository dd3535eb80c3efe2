package pipeline

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/phases"
)

// apply records decision d, taken by phase p on cycle cycle, in cp. It
// returns the transition appended to the history, or ok=false when d parks
// the capsule without one. It is pure: the caller writes cp with a
// compare-and-set, so the transition happens once or not at all.
//
// A capsule paused while its phase ran keeps its pause: the phase's work is
// recorded and the capsule parks at the next phase.
func apply(cp *capsule.Checkpoint, p capsule.Phase, cycle int, d phases.Decision, now time.Time) (capsule.Transition, bool) {
	st := &cp.State
	if d.Mutate != nil {
		d.Mutate(st)
	}
	if len(d.Findings) > 0 {
		st.Findings = d.Findings
	}
	cp.UpdatedAt = now
	st.Execution = nil
	if d.Action == phases.Park {
		// An operator's pause stands over sagad's own reasons to park.
		if st.Status != capsule.Paused || st.Pause == nil || st.Pause.Trigger != capsule.TriggerOperatorManual {
			park(st, d.Trigger, d.Reason, capsule.BySagad, now)
		}
		if p == capsule.Execution && d.Trigger != capsule.TriggerBlockedExternal {
			st.LocksHeld = []string{}
		}
		return capsule.Transition{}, false
	}
	tr := capsule.Transition{Phase: p, PhaseName: p.String(), Cycle: cycle, At: now}
	switch d.Action {
	case phases.Advance:
		if p == capsule.Handoff {
			tr.Outcome = capsule.OutcomeCompleted
			st.Status = capsule.Completed
			st.Progress = 100
			break
		}
		tr.Outcome = capsule.OutcomePassed
		st.Phase = p + 1
		if p == capsule.AutomatedGates {
			st.Cycle = 1
		}
		st.Progress = p.Progress()
	case phases.LoopBack:
		tr.Outcome = capsule.OutcomeLoopedBack
		st.Phase = capsule.Execution
		st.Cycle = cycle + 1
	case phases.Halt:
		tr.Outcome = capsule.OutcomeHalted
		tr.Detail = d.Halt.String()
		st.Status = capsule.Halted
		st.HaltReason = d.Halt.String()
	default:
		panic(fmt.Sprintf("pipeline: apply: unexpected action %d", d.Action))
	}
	st.PhaseName = st.Phase.String()
	if p == capsule.Execution || st.Status.Terminal() {
		st.LocksHeld = []string{}
	}
	if st.Status.Terminal() {
		st.Pause = nil
	} else if d.Wait {
		st.Status = capsule.WaitingForOperator
		st.Pause = &capsule.PauseInfo{Trigger: capsule.TriggerOperatorGate, Reason: "review.operator_gate: accept or revise", By: capsule.BySagad, At: now}
	} else if d.Trigger != "" && st.Status == capsule.InProgress {
		park(st, d.Trigger, d.Reason, capsule.BySagad, now)
	}
	cp.History = append(cp.History, tr)
	return tr, true
}

// park pauses the capsule at its current phase.
func park(st *capsule.CheckpointState, t capsule.Trigger, reason, by string, now time.Time) {
	st.Status = capsule.Paused
	st.Pause = &capsule.PauseInfo{Trigger: t, Reason: reason, By: by, At: now}
	if t != capsule.TriggerOperatorManual && !st.HasWarned(t) &&
		(t == capsule.TriggerBudgetWarning || t == capsule.TriggerDeadlineApproaching) {
		st.Warned = append(st.Warned, t)
	}
}

// next is where a capsule goes after transition tr, if it goes on.
func next(tr capsule.Transition) (p capsule.Phase, cycle int, ok bool) {
	switch tr.Outcome {
	case capsule.OutcomePassed:
		if tr.Phase == capsule.AutomatedGates {
			return capsule.Execution, 1, true
		}
		return tr.Phase + 1, tr.Cycle, true
	case capsule.OutcomeLoopedBack:
		return capsule.Execution, tr.Cycle + 1, true
	}
	return 0, 0, false
}

// terminalState is the capsule state a terminal transition ends in.
func terminalState(tr capsule.Transition) (capsule.State, bool) {
	switch tr.Outcome {
	case capsule.OutcomeCompleted:
		return capsule.Completed, true
	case capsule.OutcomeHalted:
		return capsule.Halted, true
	case capsule.OutcomeCancelled:
		return capsule.Cancelled, true
	}
	return "", false
}

// eventID is the deterministic id (and Nats-Msg-Id) of an event.
func eventID(key string, p capsule.Phase, cycle int, kind capsule.EventKind) string {
	return key + "." + strconv.Itoa(int(p)) + "." + strconv.Itoa(cycle) + "." + string(kind)
}

// CheckpointEvents are the lifecycle events of every transition in cp's
// phase history, in order. A transition's events are not published: they are
// derived from the checkpoint that records it, so a transition costs one
// write (see the package doc). Events that record no transition (pauses,
// operator actions, duplicates) are on the events stream.
func CheckpointEvents(cp *capsule.Checkpoint) []capsule.Event {
	var out []capsule.Event
	for _, tr := range cp.History {
		out = append(out, transitionEvents(cp, tr, transitionFindings(cp, tr))...)
	}
	return out
}

// transitionFindings are the findings that explain transition tr: the review
// of its cycle for a loop back, the halt's findings for a halt.
func transitionFindings(cp *capsule.Checkpoint, tr capsule.Transition) []capsule.Finding {
	switch tr.Outcome {
	case capsule.OutcomeLoopedBack:
		for _, r := range cp.State.Reviews {
			if r.Cycle == tr.Cycle {
				return r.Findings
			}
		}
	case capsule.OutcomeHalted:
		return cp.State.Findings
	}
	return nil
}

// transitionEvents are the lifecycle events transition tr produces.
func transitionEvents(cp *capsule.Checkpoint, tr capsule.Transition, findings []capsule.Finding) []capsule.Event {
	ev := func(kind capsule.EventKind, p capsule.Phase, cycle int, detail string, f []capsule.Finding) capsule.Event {
		return capsule.Event{
			ID: eventID(cp.Key, p, cycle, kind), Kind: kind, CapsuleID: cp.CapsuleID, Key: cp.Key,
			Phase: p, PhaseName: p.String(), Cycle: cycle, TraceID: cp.TraceID, Detail: detail, Findings: f, At: tr.At,
		}
	}
	var out []capsule.Event
	if tr.Phase == capsule.Reception {
		out = append(out, ev(capsule.EventReceived, capsule.Reception, 0, "", nil))
	}
	switch tr.Outcome {
	case capsule.OutcomePassed:
		out = append(out, ev(capsule.EventPhaseCompleted, tr.Phase, tr.Cycle, "", nil))
	case capsule.OutcomeLoopedBack:
		out = append(out, ev(capsule.EventLoopedBack, tr.Phase, tr.Cycle, tr.Detail, findings))
	case capsule.OutcomeHalted:
		out = append(out, ev(capsule.EventHalted, tr.Phase, tr.Cycle, tr.Detail, findings))
	case capsule.OutcomeCompleted:
		out = append(out, ev(capsule.EventPhaseCompleted, tr.Phase, tr.Cycle, "", nil),
			ev(capsule.EventCompleted, tr.Phase, tr.Cycle, "", nil))
	case capsule.OutcomeCancelled:
		out = append(out, ev(capsule.EventCancelled, tr.Phase, tr.Cycle, tr.Detail, nil))
	}
	if p, cycle, ok := next(tr); ok {
		out = append(out, ev(capsule.EventPhaseStarted, p, cycle, "", nil))
	}
	return out
}
