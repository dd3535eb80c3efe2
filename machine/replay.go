package machine

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sagad/sagad/capsule"
)

// Replay starts a new run of a halted or cancelled capsule under the same
// key (sagactl replay). The run is one compare-and-set of the checkpoint:
// two replays racing make one run (the second finds the capsule in
// progress and is refused), and a replay tried again with its Token finds
// its run started and changes nothing (its caller then finishes the
// effects: the kept bytes, the phase message, the event).
type Replay struct {
	// Token names this replay; required.
	Token string
	// From is the phase the run starts at, at most the phase where the
	// capsule ended. With FromSet false, that phase.
	From    capsule.Phase
	FromSet bool
	// Digest, when set, is the digest of corrected capsule bytes the
	// caller validated as RECEPTION does: the run records RECEPTION as
	// passed on them and starts at REALITY_ANCHOR. From must then be
	// RECEPTION (or unset).
	Digest string
	// By and Reason are recorded in the run boundary's detail.
	By     string
	Reason string
}

// Name implements Event.
func (Replay) Name() string { return "replay" }

// ReplayFrom is where a replay of cp starts by default: the phase where the
// capsule halted or was cancelled.
func ReplayFrom(cp *capsule.Checkpoint) capsule.Phase { return cp.State.Phase }

// MaxCycle is the highest cycle cp's capsule has reached in any run.
func MaxCycle(cp *capsule.Checkpoint) int {
	m := cp.State.Cycle
	for _, tr := range cp.History {
		m = max(m, tr.Cycle)
	}
	return m
}

func replay(cp *capsule.Checkpoint, e Replay, now time.Time) (bool, *capsule.Transition, error) {
	if e.Token == "" {
		return false, nil, refuse(ErrInvalid, e, cp, "no replay token")
	}
	if cp.ReplayToken == e.Token {
		return false, nil, nil // this replay's run is started: the caller finishes its effects
	}
	from, err := replayFrom(cp, e)
	if err != nil {
		return false, nil, err
	}
	st := &cp.State
	ended := st.Phase
	last := MaxCycle(cp)
	cycle := last + 1 // cycles number on: nothing of an earlier run is found again
	run := cp.RunNumber() + 1
	lastArtifact := ""
	if n := len(st.ArtifactRefs); n > 0 {
		lastArtifact = st.ArtifactRefs[n-1]
	}
	// The boundary stands where the last run ended, so no phase of the new
	// run mistakes it for its own recorded transition.
	record(cp, capsule.Transition{
		Phase: ended, PhaseName: ended.String(), Cycle: st.Cycle, Outcome: capsule.OutcomeReplayed,
		Detail: replayDetail(e, run, from, cycle), Run: run, At: now,
	})
	cp.Run, cp.CycleBase, cp.ReplayToken = run, last, e.Token
	resetForRun(st)
	var tr *capsule.Transition
	if e.Digest != "" {
		cp.Digest = e.Digest
		t := capsule.Transition{Phase: capsule.Reception, PhaseName: capsule.Reception.String(), Cycle: cycle,
			Outcome: capsule.OutcomePassed, Detail: "corrected capsule", Run: run, At: now}
		tr = record(cp, t)
		from = capsule.RealityAnchor
	}
	if from >= capsule.ReviewPhase && lastArtifact != "" {
		// REVIEW (and HANDOFF) of the new run take up the last artifact,
		// recorded as this cycle's result; its usage was charged already.
		st.Result = &capsule.ExecutionResult{Cycle: cycle, ArtifactRef: lastArtifact}
	}
	st.Phase, st.PhaseName, st.Cycle = from, from.String(), cycle
	st.Progress = 0
	if from > 0 {
		st.Progress = (from - 1).Progress()
	}
	return true, tr, nil
}

// replayFrom is the phase a replay of cp starts at, or the reason it is
// refused: only a halted or cancelled capsule RECEPTION accepted runs
// again, from where it ended or earlier, and RECEPTION only on corrected
// bytes.
func replayFrom(cp *capsule.Checkpoint, e Replay) (capsule.Phase, error) {
	switch cp.State.Status {
	case capsule.Halted, capsule.Cancelled:
	case capsule.Completed:
		return 0, refused(e, cp, "it completed; only a halted or cancelled capsule runs again")
	default:
		return 0, refused(e, cp, "it has not ended; only a halted or cancelled capsule runs again")
	}
	if strings.HasPrefix(cp.Key, "x-") {
		// RECEPTION kept it under its intake sequence: the bytes never
		// owned their id, and a corrected capsule published again runs
		// under it.
		return 0, refused(e, cp, "RECEPTION never accepted it (it is kept under its intake sequence): publish the corrected capsule, its id is free")
	}
	ended := cp.State.Phase
	from := ended
	if e.Digest != "" {
		if e.FromSet && e.From != capsule.Reception {
			return 0, refuse(ErrInvalid, e, cp, "corrected bytes run from RECEPTION")
		}
		from = capsule.Reception
	} else if e.FromSet {
		from = e.From
	}
	switch {
	case !from.Valid():
		return 0, refuse(ErrInvalid, e, cp, fmt.Sprintf("phase %d out of range 0–%d", int(from), capsule.NumPhases-1))
	case from == capsule.Reception && e.Digest == "":
		return 0, refused(e, cp, "RECEPTION runs only on corrected bytes: --capsule FILE, or --from-phase 1 or later")
	case from > ended:
		return 0, refused(e, cp, fmt.Sprintf("it ended at %s (phase %d): a replay starts there or earlier, not at %s (phase %d)",
			ended, int(ended), from, int(from)))
	}
	return from, nil
}

// replayDetail is the replay boundary's detail: the run, where it starts,
// the corrected bytes, who asked and why.
func replayDetail(e Replay, run int, from capsule.Phase, cycle int) string {
	detail := "run " + strconv.Itoa(run) + " from " + from.String() + " cycle " + strconv.Itoa(cycle)
	if e.Digest != "" {
		detail += ", corrected capsule " + e.Digest
	}
	if e.By != "" {
		detail += ", by " + e.By
	}
	if e.Reason != "" {
		detail += ": " + e.Reason
	}
	return detail
}

// resetForRun clears what belonged to the ended run. Budget used, raised
// caps, fired warnings, artifacts and reviews carry over: spend
// accumulates across runs and the caps hold for all of them.
func resetForRun(st *capsule.CheckpointState) {
	st.Status = capsule.InProgress
	st.HaltReason = ""
	st.Pause, st.Execution, st.Result = nil, nil, nil
	st.AwaitingCycle, st.AwaitingUntil, st.AwaitingTokenHash = 0, nil, ""
	st.WaitingFor, st.LockWaitSince = nil, nil
	st.Findings = nil
	// The ended run's wave reservation was released when it ended; a run
	// from AUTOMATED_GATES or earlier reserves anew.
	st.WaveReserved = nil
	st.LocksHeld = []string{}
	// A composition step's gate asks a person again for every run: a
	// decision was on the run it held.
	st.Warned = without(st.Warned, capsule.TriggerCompositionGate)
}
