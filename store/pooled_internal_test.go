package store

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/differential"
	"github.com/sagad/sagad/internal/jspub"
)

// hopMsgs is what a capsule's deferred phase message and outcome are made
// of.
type hopMsgs struct {
	cp       *capsule.Checkpoint
	deferred []Deferred
	tr       capsule.Transition
	state    capsule.State
	raw      []byte
}

// msgView is a message's subject, body and headers, copied out of a
// pooled message before it is released.
type msgView struct {
	Subject string
	Data    []byte
	Header  nats.Header
}

func viewOf(m *nats.Msg) msgView {
	h := make(nats.Header, len(m.Header))
	for k, v := range m.Header {
		h[k] = slices.Clone(v)
	}
	return msgView{Subject: m.Subject, Data: slices.Clone(m.Data), Header: h}
}

var outcomeStates = []capsule.State{capsule.Completed, capsule.Halted, capsule.Cancelled}

// pooledMsgsPair: the deferred phase message SendDeferred publishes and the
// outcome sendOutcome publishes, each built in a pooled message (one
// after another: what the one before held must be gone), are the messages
// of their own EncodeDeferredMsg and outcomeMsg make.
var pooledMsgsPair = differential.Pair[hopMsgs, []msgView]{
	Name: "PooledMsgs",
	Fast: func(in hopMsgs) ([]msgView, error) {
		p := jspub.GetMsg(PhaseSubject(in.cp.State.Phase), nil)
		deferredHeaders(p.Headers(), in.cp, in.deferred)
		d := viewOf(p.Msg())
		p.Release()
		p = jspub.GetLargeMsg(OutcomeSubject(in.state), in.raw)
		outcomeHeaders(p.Headers(), in.cp, in.tr, in.state)
		o := viewOf(p.Msg())
		p.Release()
		return []msgView{d, o}, nil
	},
	Reference: func(in hopMsgs) ([]msgView, error) {
		return []msgView{viewOf(EncodeDeferredMsg(in.cp, in.deferred)), viewOf(outcomeMsg(in.cp, in.tr, in.state, in.raw))}, nil
	},
	Seeds: []hopMsgs{
		{cp: &capsule.Checkpoint{Key: "k"}, state: capsule.Completed},
		{cp: &capsule.Checkpoint{Key: "0f8fad5b-d9cb-469f-a165-70867728950e", CapsuleID: "c", TraceID: "t", Constitution: "2026.11.3+0123abcd", Run: 2,
			State: capsule.CheckpointState{Phase: capsule.Handoff, Cycle: 3, ArtifactRefs: []string{"artifact:x/1", "artifact:x/2"}}},
			deferred: []Deferred{{Phase: capsule.Planning, At: time.Unix(0, 1)}, {Phase: capsule.AutomatedGates, At: time.Unix(1_700_000_000, 5)}},
			tr:       capsule.Transition{Phase: capsule.Handoff, Cycle: 3, Detail: "executor_failed:x"}, state: capsule.Halted, raw: []byte(`{"capsule_id":"c"}`)},
	},
	Generate: func(r *rand.Rand) hopMsgs {
		cp := randomCapsule(r)
		in := hopMsgs{cp: cp, state: outcomeStates[r.IntN(3)], raw: []byte(`{"capsule_id":"c"}`)}
		in.tr = capsule.Transition{Phase: cp.State.Phase, Cycle: cp.State.Cycle, Detail: []string{"", "executor_failed:x"}[r.IntN(2)]}
		for ph := capsule.Planning; ph <= capsule.AutomatedGates; ph++ {
			if r.IntN(2) == 0 {
				in.deferred = append(in.deferred, Deferred{Phase: ph, At: time.Unix(0, r.Int64N(1e18)+1).UTC()})
			}
		}
		// Half the time, more headers than a pooled message holds
		// without growing.
		if r.IntN(2) == 0 {
			cp.CapsuleID, cp.Constitution, in.state, in.tr.Detail = "c", "v1", capsule.Halted, "h"
			cp.State.ArtifactRefs, cp.Run = []string{"artifact:x/1"}, 2
		}
		return in
	},
	Count: 3000,
	// The fuzzer's bytes: five numbers (run, phase, cycle, state, the
	// deferred phases as bits), then key, capsule id, trace id,
	// constitution, artifact refs (comma-separated), the transition's
	// detail and the body, separated by 0x1f.
	Decode: func(b []byte) (hopMsgs, bool) {
		if len(b) < 5 {
			return hopMsgs{}, false
		}
		f := strings.Split(string(b[5:]), "\x1f")
		if len(f) != 7 {
			return hopMsgs{}, false
		}
		cp := &capsule.Checkpoint{Key: f[0], CapsuleID: f[1], TraceID: f[2], Constitution: f[3], Run: int(b[0])}
		if f[4] != "" {
			cp.State.ArtifactRefs = strings.Split(f[4], ",")
		}
		cp.State.Phase, cp.State.Cycle = capsule.Phase(b[1]%7), int(b[2])
		in := hopMsgs{cp: cp, state: outcomeStates[int(b[3])%3], raw: []byte(f[6])}
		in.tr = capsule.Transition{Phase: cp.State.Phase, Cycle: cp.State.Cycle, Detail: f[5]}
		for ph := capsule.Planning; ph <= capsule.AutomatedGates; ph++ {
			if b[4]&(1<<ph) != 0 {
				in.deferred = append(in.deferred, Deferred{Phase: ph, At: time.Unix(0, int64(binary.BigEndian.Uint16(b[3:5]))<<int(ph)).UTC()})
			}
		}
		return in, true
	},
	Encode: func(in hopMsgs) []byte {
		var bits byte
		for _, d := range in.deferred {
			bits |= 1 << d.Phase
		}
		b := []byte{byte(in.cp.Run), byte(in.cp.State.Phase), byte(in.cp.State.Cycle), byte(slices.Index(outcomeStates, in.state)), bits}
		cp := in.cp
		return append(b, strings.Join([]string{cp.Key, cp.CapsuleID, cp.TraceID, cp.Constitution,
			strings.Join(cp.State.ArtifactRefs, ","), in.tr.Detail, string(in.raw)}, "\x1f")...)
	},
}

func FuzzPooledMsgs(f *testing.F) { differential.Fuzz(f, pooledMsgsPair) }

// outcomeMsg is the outcome as sagad made it before sendOutcome pooled it:
// a message of its own, the pair's reference.
func outcomeMsg(cp *capsule.Checkpoint, tr capsule.Transition, state capsule.State, raw []byte) *nats.Msg {
	h := jspub.NewHeaders(12)
	outcomeHeaders(&h, cp, tr, state)
	return jspub.NewMsg(OutcomeSubject(state), raw, h)
}
