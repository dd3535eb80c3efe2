package store

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/internal/jspub"
	"github.com/sagad/sagad/machine"
)

// The messages as they were made with nats.Header.Set, which the sized
// headers must match key for key and value for value.

func refCapsuleHeaders(m *nats.Msg, cp *capsule.Checkpoint) {
	m.Header.Set(HeaderKey, cp.Key)
	if cp.CapsuleID != "" {
		m.Header.Set(HeaderCapsuleID, cp.CapsuleID)
	}
	m.Header.Set(HeaderTraceID, cp.TraceID)
}

func refPhaseMsg(cp *capsule.Checkpoint, token string) *nats.Msg {
	m := nats.NewMsg(PhaseSubject(cp.State.Phase))
	m.Header.Set(HeaderKey, cp.Key)
	if cp.CapsuleID != "" && cp.CapsuleID != cp.Key {
		m.Header.Set(HeaderCapsuleID, cp.CapsuleID)
	}
	m.Header.Set(HeaderCycle, strconv.Itoa(cp.State.Cycle))
	if token != "" {
		m.Header.Set(HeaderResumeToken, token)
	}
	return m
}

func refOutcomeMsg(cp *capsule.Checkpoint, tr capsule.Transition, state capsule.State, raw []byte) *nats.Msg {
	m := nats.NewMsg(OutcomeSubject(state))
	m.Data = raw
	refCapsuleHeaders(m, cp)
	m.Header.Set(HeaderState, string(state))
	m.Header.Set(HeaderPhase, strconv.Itoa(int(tr.Phase)))
	m.Header.Set(HeaderCycle, strconv.Itoa(tr.Cycle))
	if tr.Detail != "" && state == capsule.Halted {
		m.Header.Set(HeaderHaltReason, tr.Detail)
	}
	if by, verdict, ok := machine.AcceptedOver(cp); ok && state == capsule.Completed {
		m.Header.Set(HeaderAcceptedOver, string(verdict)+" by "+by)
	}
	if len(cp.State.ArtifactRefs) > 0 {
		m.Header.Set(HeaderArtifacts, strings.Join(cp.State.ArtifactRefs, ","))
	}
	if cp.Constitution != "" {
		m.Header.Set(HeaderConstitution, cp.Constitution)
	}
	m.Header.Set(jetstream.MsgIDHeader, OutcomeMsgID(cp))
	if run := cp.RunNumber(); run > 1 {
		m.Header.Set(HeaderRun, strconv.Itoa(run))
	}
	return m
}

func refCheckpointWrite(key string, b []byte, rev uint64, ttl time.Duration) *nats.Msg {
	m := nats.NewMsg("$KV." + CheckpointsBucket + "." + key)
	m.Data = b
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	if ttl > 0 {
		m.Header.Set(jetstream.MsgTTLHeader, ttl.String())
	}
	return m
}

// randomCapsule is a checkpoint with every header-bearing part present or
// not at random.
func randomCapsule(r *rand.Rand) *capsule.Checkpoint {
	cp := &capsule.Checkpoint{Key: "k-" + strconv.Itoa(r.IntN(1000)), TraceID: "t" + strconv.Itoa(r.IntN(9))}
	if r.IntN(2) == 0 {
		cp.CapsuleID = "c" + strconv.Itoa(r.IntN(9))
	}
	if r.IntN(2) == 0 {
		cp.Constitution = "2026.11.3+0123abcd"
	}
	for n := r.IntN(3); n > 0; n-- {
		cp.State.ArtifactRefs = append(cp.State.ArtifactRefs, "artifact:x/"+strconv.Itoa(n))
	}
	cp.Run = r.IntN(3)
	cp.State.Phase, cp.State.Cycle = capsule.Phase(r.IntN(7)), r.IntN(4)
	if r.IntN(3) == 0 {
		cp.State.Cycle = cp.State.Cycle % 2
		cp.State.Reviews = []capsule.ReviewEntry{
			{Cycle: cp.State.Cycle, ReviewerID: "r", Verdict: capsule.ChangesRequested},
			{Cycle: cp.State.Cycle, ReviewerID: machine.OperatorReviewer + "ann", Verdict: capsule.Approved,
				Findings: []capsule.Finding{{Message: machine.OperatorAcceptance + "CHANGES_REQUESTED of r"}}},
		}
	}
	return cp
}

// TestMessagesAsSet: the phase, outcome, event and checkpoint-write
// messages carry exactly the subject, body and headers the nats.Header.Set
// versions did, over random capsules.
func TestMessagesAsSet(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(9, 10))
	for range 3000 {
		cp := randomCapsule(r)
		token := []string{"", "tok"}[r.IntN(2)]
		require.Equal(t, refPhaseMsg(cp, token), EncodePhaseMsg(cp, token))

		tr := capsule.Transition{Phase: cp.State.Phase, Cycle: cp.State.Cycle, Detail: []string{"", "executor_failed:x"}[r.IntN(2)]}
		state := []capsule.State{capsule.Completed, capsule.Halted, capsule.Cancelled}[r.IntN(3)]
		raw := []byte(`{"capsule_id":"c"}`)
		require.Equal(t, refOutcomeMsg(cp, tr, state, raw), outcomeMsg(cp, tr, state, raw))

		rev, ttl := r.Uint64N(1e6), []time.Duration{0, time.Hour, 168 * time.Hour}[r.IntN(3)]
		w := kvWrite(cp.Key, raw, strconv.FormatUint(rev, 10), ttl)
		require.Equal(t, refCheckpointWrite(cp.Key, raw, rev, ttl), w.Msg())
		w.Release()

		p := jspub.GetMsg(PhaseSubject(cp.State.Phase), nil)
		phaseHeaders(p.Headers(), cp, token)
		requireSameMsg(t, refPhaseMsg(cp, token), p.Msg())
		p.Release()
	}
	ev := capsule.Event{ID: "k.1.0.phase_completed.1", Kind: capsule.EventPhaseCompleted, Key: "k", TraceID: "t"}
	got, err := eventMsg(ev)
	require.NoError(t, err)
	want := nats.NewMsg(EventSubject("k"))
	want.Data, _ = json.Marshal([]capsule.Event{ev})
	want.Header.Set(HeaderEventID, ev.ID)
	want.Header.Set(HeaderTraceID, ev.TraceID)
	require.Equal(t, want, got)
}

// requireSameMsg: got has want's subject, body and headers.
func requireSameMsg(t *testing.T, want, got *nats.Msg) {
	t.Helper()
	require.Equal(t, want.Subject, got.Subject)
	require.Equal(t, want.Data, got.Data)
	require.Equal(t, want.Header, got.Header)
}

// BenchmarkCheckpointWrites: a capsule's nine checkpoint writes as the store
// prepares them (the encoding and the message), one transition more at
// each, before (a full encoding, the message made with nats.Header.Set) and
// now (the kept history, the reused message).
func BenchmarkCheckpointWrites(b *testing.B) {
	cp := NewCheckpoint("0f8fad5b-d9cb-469f-a165-70867728950e", "0f8fad5b-d9cb-469f-a165-70867728950e", "4bf92f3577b34da6a3ce929d0e0e4736", "",
		"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", time.Date(2026, 11, 22, 7, 8, 9, 123456789, time.UTC))
	cp.State.LocksHeld, cp.State.ArtifactRefs = []string{"repo:sagad/capsule"}, []string{"artifact:0f8fad5b-d9cb-469f-a165-70867728950e/1"}
	var ts []capsule.Transition
	for i := range 9 {
		ph := capsule.Phase(i % 7)
		ts = append(ts, capsule.Transition{Phase: ph, PhaseName: ph.String(), Cycle: 1, Outcome: capsule.OutcomePassed, At: cp.CreatedAt.Add(time.Duration(i) * 1234567 * time.Microsecond)})
	}
	b.Run("before", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			for i := 1; i <= len(ts); i++ {
				cp.History = ts[:i:i]
				buf, _ = cp.AppendJSON(buf[:0])
				sinkMsg = refCheckpointWrite(cp.Key, buf, uint64(1000+i), 0)
			}
		}
	})
	b.Run("now", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for i := 1; i <= len(ts); i++ {
				cp.History = ts[:i:i]
				cp.State.Status = capsule.InProgress
				if i == len(ts) {
					cp.State.Status = capsule.Completed
				}
				e, _ := encode(cp)
				w := kvWrite(cp.Key, e.b, strconv.FormatUint(uint64(1000+i), 10), 0)
				sinkMsg = w.Msg()
				w.Release()
				e.release()
			}
		}
	})
}

var sinkMsg *nats.Msg

// BenchmarkPhaseMsg: a phase message as it was made (nats.Header.Set) and
// as emit makes it now (a pooled message).
func BenchmarkPhaseMsg(b *testing.B) {
	cp := &capsule.Checkpoint{Key: "0f8fad5b-d9cb-469f-a165-70867728950e", CapsuleID: "0f8fad5b-d9cb-469f-a165-70867728950e", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"}
	cp.State.Phase, cp.State.Cycle = capsule.Execution, 1
	b.Run("nats.Header.Set", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sinkMsg = refPhaseMsg(cp, "")
		}
	})
	b.Run("pooled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p := jspub.GetMsg(PhaseSubject(cp.State.Phase), nil)
			phaseHeaders(p.Headers(), cp, "")
			sinkMsg = p.Msg()
			p.Release()
		}
	})
}

// BenchmarkHopMessages: a deferred phase message and an outcome as they
// were made (a message of their own, EncodeDeferredMsg and outcomeMsg) and
// as SendDeferred and sendOutcome make them now (a pooled message).
func BenchmarkHopMessages(b *testing.B) {
	cp := &capsule.Checkpoint{Key: "0f8fad5b-d9cb-469f-a165-70867728950e", CapsuleID: "0f8fad5b-d9cb-469f-a165-70867728950e",
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Constitution: "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
	cp.State.Phase, cp.State.Cycle = capsule.Execution, 1
	cp.State.ArtifactRefs = []string{"artifact:0f8fad5b-d9cb-469f-a165-70867728950e/1"}
	at := time.Date(2026, 11, 22, 7, 8, 9, 123456789, time.UTC)
	deferred := []Deferred{{Phase: capsule.Planning, At: at}, {Phase: capsule.RealityAnchor, At: at}, {Phase: capsule.AutomatedGates, At: at}}
	tr := capsule.Transition{Phase: capsule.Handoff, Cycle: 1}
	raw := []byte(`{"capsule_id":"0f8fad5b-d9cb-469f-a165-70867728950e"}`)
	b.Run("deferred/own", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sinkMsg = EncodeDeferredMsg(cp, deferred)
		}
	})
	b.Run("deferred/pooled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p := jspub.GetMsg(PhaseSubject(cp.State.Phase), nil)
			deferredHeaders(p.Headers(), cp, deferred)
			sinkMsg = p.Msg()
			p.Release()
		}
	})
	b.Run("outcome/own", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sinkMsg = outcomeMsg(cp, tr, capsule.Completed, raw)
		}
	})
	b.Run("outcome/pooled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p := jspub.GetLargeMsg(OutcomeSubject(capsule.Completed), raw)
			outcomeHeaders(p.Headers(), cp, tr, capsule.Completed)
			sinkMsg = p.Msg()
			p.Release()
		}
	})
}

// TestPhaseMsgPointsAtTheCheckpoint: a phase message names the checkpoint
// (key and cycle) and nothing the checkpoint or the subject already says:
// no phase, no trace id, and the capsule id only where it is not the key.
// DecodePhaseMsg still reads a message an older sagad sent with them.
func TestPhaseMsgPointsAtTheCheckpoint(t *testing.T) {
	t.Parallel()
	cp := &capsule.Checkpoint{Key: "c1", CapsuleID: "c1", TraceID: "0af7651916cd43dd8448eb211c80319c",
		State: capsule.CheckpointState{Phase: capsule.Execution, Cycle: 2, Status: capsule.InProgress}}
	m := EncodePhaseMsg(cp, "")
	require.Equal(t, PhaseSubject(capsule.Execution), m.Subject)
	require.Equal(t, nats.Header{HeaderKey: {"c1"}, HeaderCycle: {"2"}}, m.Header)

	other := *cp
	other.Key = "c1-step"
	m = EncodePhaseMsg(&other, "tok")
	require.Equal(t, nats.Header{HeaderKey: {"c1-step"}, HeaderCapsuleID: {"c1"}, HeaderCycle: {"2"}, HeaderResumeToken: {"tok"}}, m.Header)

	old := refPhaseMsg(cp, "")
	refCapsuleHeaders(old, cp)
	old.Header.Set(HeaderPhase, "4")
	pm, _, err := DecodePhaseMsg(old.Header)
	require.NoError(t, err)
	require.Equal(t, "c1", pm.Key)
	require.Equal(t, 2, pm.Cycle)
}
