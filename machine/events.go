package machine

import (
	"slices"
	"strconv"

	"github.com/sagad/sagad/capsule"
)

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
	if len(cp.State.AttemptLog) == 0 {
		return out
	}
	// Failed attempts record no transition: their events come from the
	// attempt log, placed among the transitions' by time (a transition's
	// events keep their order). An attempt comes before a transition of
	// the same instant: the halt it led to is recorded with it.
	all := make([]capsule.Event, 0, len(cp.State.AttemptLog)+len(out))
	for _, a := range cp.State.AttemptLog {
		all = append(all, attemptEvent(cp, a))
	}
	all = append(all, out...)
	slices.SortStableFunc(all, func(x, y capsule.Event) int { return x.At.Compare(y.At) })
	return all
}

// attemptEvent is the attempt_failed event of a logged failed attempt. Its
// id names the attempt: a cycle may fail several times.
func attemptEvent(cp *capsule.Checkpoint, a capsule.FailedAttempt) capsule.Event {
	return capsule.Event{
		ID:   eventID(cp.Key, a.Phase, a.Cycle, capsule.EventAttemptFailed) + "." + strconv.Itoa(a.Attempt),
		Kind: capsule.EventAttemptFailed, CapsuleID: cp.CapsuleID, Key: cp.Key,
		Phase: a.Phase, PhaseName: a.Phase.String(), Cycle: a.Cycle, TraceID: cp.TraceID,
		Detail: AttemptDetail(a), At: a.At,
	}
}

// AttemptDetail says in one line what a failed attempt was and what the
// failure policy did: "attempt 2 exit 12: <error> -> retry".
func AttemptDetail(a capsule.FailedAttempt) string {
	how := ""
	switch {
	case a.Timeout:
		how = " timed out"
	case a.ExitCode != 0:
		how = " exit " + strconv.Itoa(a.ExitCode)
	}
	return "attempt " + strconv.Itoa(a.Attempt) + how + ": " + a.Error + " -> " + a.Decision
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
		// Run 1's received event keeps cycle 0 (its id is older than
		// replay); a later run's RECEPTION has a cycle of its own, so its
		// event is not taken for a duplicate of run 1's.
		cycle := 0
		if tr.Run > 1 {
			cycle = tr.Cycle
		}
		out = append(out, ev(capsule.EventReceived, capsule.Reception, cycle, "", nil))
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
	if p, cycle, ok := Next(tr); ok {
		out = append(out, ev(capsule.EventPhaseStarted, p, cycle, "", nil))
	}
	return out
}
