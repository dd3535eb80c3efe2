package pipeline

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/differential"
	"github.com/sagad/sagad/machine"
	"github.com/sagad/sagad/phases"
)

// differentialPairs are this package's fast paths, each held to the
// routine it replaces by the shared harness (internal/differential).
var differentialPairs = differential.Registry{applyAdvancePair, traceIDOfPair}

func TestDifferential(t *testing.T) {
	t.Parallel()
	differential.RunAll(t, differentialPairs)
}

func FuzzApplyAdvance(f *testing.F) { differential.Fuzz(f, applyAdvancePair) }
func FuzzTraceIDOf(f *testing.F)    { differential.Fuzz(f, traceIDOfPair) }

// advanceIn is one decision applied to a checkpoint: the checkpoint is
// made from its fields (advanceCheckpoint), so that the fuzzer's bytes
// name it.
type advanceIn struct {
	Phase  capsule.Phase // where the checkpoint stands
	Status capsule.State
	Cycle  int
	// Claim: 0 none, 1 another delivery's claim on the cycle, live at At,
	// 2 the same, lapsed.
	Claim int
	// Event is the phase and cycle the decision is applied as.
	EvPhase capsule.Phase
	EvCycle int
	// Kind: 0 a plain advance, 1 an advance with a reason, 2 a halt, 3 a
	// park.
	Kind int
	// At is the decision's time, as an offset from the checkpoint's
	// UpdatedAt; Zone: 0 UTC, 1 a fixed zone east.
	At   time.Duration
	Zone int
}

var advanceT0 = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)

// checkpoint makes the checkpoint in stands for, with a history of the
// phases before its own that has room (as machine's appends make it).
func (in advanceIn) checkpoint() *capsule.Checkpoint {
	cp := &capsule.Checkpoint{
		SchemaVersion: capsule.CheckpointSchemaVersion, CapsuleID: "k", Key: "k", TraceID: "t", Digest: "d",
		CreatedAt: advanceT0, UpdatedAt: advanceT0,
		State: capsule.CheckpointState{Phase: in.Phase, PhaseName: in.Phase.String(), Cycle: in.Cycle, Status: in.Status,
			LocksHeld: []string{}, ArtifactRefs: []string{}},
	}
	cp.History = make([]capsule.Transition, 0, capsule.NumPhases)
	for ph := capsule.Reception; ph < in.Phase; ph++ {
		cp.History = append(cp.History, capsule.Transition{Phase: ph, PhaseName: ph.String(), Outcome: capsule.OutcomePassed, At: advanceT0})
	}
	if in.Status == capsule.Paused {
		cp.State.Pause = &capsule.PauseInfo{Trigger: capsule.TriggerOperatorManual, Reason: "r", By: "x", At: advanceT0}
	}
	if in.Claim > 0 {
		exp := advanceT0.Add(in.At + time.Second)
		if in.Claim == 2 {
			exp = advanceT0.Add(in.At - time.Second)
		}
		cp.State.Execution = &capsule.ExecutionClaim{Cycle: in.Cycle, Holder: "other", ExpiresAt: exp}
	}
	return cp
}

func (in advanceIn) decision() phases.Decision {
	switch in.Kind {
	case 1:
		d := phases.AdvanceWith()
		d.Reason = "why"
		return d
	case 2:
		return phases.HaltWith(capsule.HaltReason{Code: capsule.CodeAbsoluteRulesViolated, Detail: "3"})
	case 3:
		return phases.ParkWith(capsule.TriggerDeadlineApproaching, "soon")
	}
	return phases.AdvanceWith()
}

func (in advanceIn) at() time.Time {
	at := advanceT0.Add(in.At)
	if in.Zone == 1 {
		at = at.In(time.FixedZone("east", 5*3600))
	}
	return at
}

// applyAdvancePair: Pipeline.applyDecision, which keeps a plain advance's
// result for the catch-ups that apply it again (advances.go), gives what
// machine.Apply gives, from the memo as much as computed. The memo is
// primed with the same decision at the instants on either side, at the
// neighbouring phases and cycles, and at the same instant in another zone, then asked twice (the second time taking
// the result, which leaves the memo as it was primed).
var applyAdvancePair = differential.Pair[advanceIn, machine.Result]{
	Name: "ApplyAdvance",
	Fast: func(in advanceIn) (machine.Result, error) {
		p := &Pipeline{advances: newAdvanceMemo(false)}
		cp, d, at := in.checkpoint(), in.decision(), in.at()
		for _, other := range []time.Time{at.Add(-time.Nanosecond), at.Add(time.Nanosecond)} {
			_, _ = p.applyDecision(cp, in.EvPhase, in.EvCycle, d, other, applyShared)
		}
		for _, dc := range []int{-1, 1} {
			_, _ = p.applyDecision(cp, in.EvPhase, in.EvCycle+dc, d, at, applyShared)
			_, _ = p.applyDecision(cp, in.EvPhase+capsule.Phase(dc), in.EvCycle, d, at, applyShared)
		}
		primed := p.advances.len()
		if _, err := p.applyDecision(cp, in.EvPhase, in.EvCycle, d, at.In(time.FixedZone("west", -7*3600)), applyFresh); err != nil {
			return machine.Result{}, err
		}
		if _, err := p.applyDecision(cp, in.EvPhase, in.EvCycle, d, at, applyShared); err != nil {
			return machine.Result{}, err
		}
		res, err := p.applyDecision(cp, in.EvPhase, in.EvCycle, d, at, applyTaken)
		if err == nil && p.advances.len() != primed {
			return res, errors.New("a taken result stays in the memo")
		}
		return res, err
	},
	Reference: func(in advanceIn) (machine.Result, error) {
		return machine.Apply(in.checkpoint(), machine.Decide{Phase: in.EvPhase, Cycle: in.EvCycle, Decision: in.decision()}, in.at())
	},
	Seeds:    advanceSeeds(),
	Generate: func(r *rand.Rand) advanceIn { return decodeAdvanceIn(randomBytes(r, 16)) },
	Decode:   func(b []byte) (advanceIn, bool) { return decodeAdvanceIn(b), len(b) >= 16 },
	Encode:   encodeAdvanceIn,
}

func advanceSeeds() []advanceIn {
	var seeds []advanceIn
	for ph := capsule.RealityAnchor; ph <= capsule.Handoff; ph++ {
		for kind := range 4 {
			seeds = append(seeds, advanceIn{Phase: ph, Status: capsule.InProgress, EvPhase: ph, Kind: kind, At: time.Millisecond})
		}
	}
	return append(seeds,
		advanceIn{Phase: capsule.Planning, Status: capsule.InProgress, Cycle: 0, EvPhase: capsule.Planning, At: -time.Hour, Zone: 1},
		advanceIn{Phase: capsule.Execution, Status: capsule.InProgress, Cycle: 1, EvPhase: capsule.Execution, EvCycle: 1, Claim: 1},
		advanceIn{Phase: capsule.Execution, Status: capsule.InProgress, Cycle: 1, EvPhase: capsule.Execution, EvCycle: 1, Claim: 2},
		advanceIn{Phase: capsule.AutomatedGates, Status: capsule.Paused, EvPhase: capsule.AutomatedGates, At: time.Second},
		advanceIn{Phase: capsule.Planning, Status: capsule.InProgress, EvPhase: capsule.RealityAnchor},
		advanceIn{Phase: capsule.Planning, Status: capsule.Halted, EvPhase: capsule.Planning},
		advanceIn{Phase: capsule.ReviewPhase, Status: capsule.InProgress, Cycle: 2, EvPhase: capsule.ReviewPhase, EvCycle: 1},
	)
}

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

var advanceStatuses = []capsule.State{capsule.InProgress, capsule.Paused, capsule.Halted, capsule.Completed}

// decodeAdvanceIn reads an input from 16 bytes: phase, status, cycle,
// claim, event phase, event cycle, kind, zone, then the offset of At in
// nanoseconds (little-endian).
func decodeAdvanceIn(b []byte) advanceIn {
	if len(b) < 16 {
		b = append(b, make([]byte, 16-len(b))...)
	}
	return advanceIn{
		Phase: capsule.Phase(b[0] % byte(capsule.NumPhases)), Status: advanceStatuses[b[1]%4], Cycle: int(b[2] % 3),
		Claim: int(b[3] % 3), EvPhase: capsule.Phase(b[4] % byte(capsule.NumPhases)), EvCycle: int(b[5] % 3),
		Kind: int(b[6] % 4), Zone: int(b[7] % 2), At: time.Duration(int64(binary.LittleEndian.Uint64(b[8:16]))),
	}
}

func encodeAdvanceIn(in advanceIn) []byte {
	status := 0
	for i, s := range advanceStatuses {
		if s == in.Status {
			status = i
		}
	}
	b := []byte{byte(in.Phase), byte(status), byte(in.Cycle), byte(in.Claim), byte(in.EvPhase), byte(in.EvCycle), byte(in.Kind), byte(in.Zone)}
	return binary.LittleEndian.AppendUint64(b, uint64(in.At))
}
