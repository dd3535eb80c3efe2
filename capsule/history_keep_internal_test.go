package capsule

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// randomTransition is one of few values per field, so that histories
// often share transitions and differ in one field only.
func randomTransition(r *rand.Rand, at time.Time) Transition {
	locs := []*time.Location{time.UTC, time.FixedZone("X", 3600)}
	details := []string{"", "d", "executor_failed:\u2028\x01<&>"}
	return Transition{
		Phase: Phase(r.IntN(int(NumPhases))), PhaseName: Phase(r.IntN(int(NumPhases))).String(),
		Cycle: r.IntN(3), Outcome: []string{OutcomePassed, OutcomeHalted, "x\"y"}[r.IntN(3)],
		Detail: details[r.IntN(len(details))], Run: r.IntN(2),
		At: at.Add(time.Duration(r.IntN(3)) * time.Nanosecond).In(locs[r.IntN(len(locs))]),
	}
}

// nextHistory is how a capsule's history goes from one write to the next:
// mostly one transition more, sometimes another capsule's (or a reread
// checkpoint's) history, a transition changed in place, one dropped, none.
func nextHistory(r *rand.Rand, ts []Transition, at time.Time) []Transition {
	switch r.IntN(10) {
	case 0:
		return nil
	case 1:
		return []Transition{}
	case 2:
		if len(ts) > 0 {
			ts = append([]Transition(nil), ts...)
			ts[r.IntN(len(ts))] = randomTransition(r, at)
			return ts
		}
	case 3:
		if len(ts) > 0 {
			return ts[:r.IntN(len(ts))]
		}
	}
	return append(ts, randomTransition(r, at))
}

// TestAppendJSONKeepingMatchesAppendJSON: one HistoryEncoding carried
// over thousands of writes of changing histories writes, at every write,
// AppendJSON's bytes (and encoding/json's), whether it could reuse its
// bytes or not; the caller's slice changed in place after a write does not
// reach what it keeps.
func TestAppendJSONKeepingMatchesAppendJSON(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	cp := fullCheckpoint()
	at := cp.CreatedAt
	var h HistoryEncoding
	var buf []byte
	for i := 0; i < 20000; i++ {
		cp.History = nextHistory(r, cp.History, at)
		want, err := cp.AppendJSON(nil)
		require.NoError(t, err)
		buf, err = cp.AppendJSONKeeping(buf[:0], &h)
		require.NoError(t, err)
		require.Equal(t, string(want), string(buf), "write %d", i)
		if i%100 == 0 {
			std, err := json.Marshal(cp)
			require.NoError(t, err)
			require.Equal(t, string(std), string(buf), "write %d", i)
		}
		if len(cp.History) > 0 && r.IntN(20) == 0 {
			cp.History[len(cp.History)-1].Detail += "!" // changed in place
		}
		if len(cp.History) > 30 {
			cp.History = cp.History[:0:0]
		}
	}
}

// TestAppendJSONKeepingRejectsWhatAppendJSONRejects: a transition that
// cannot be encoded fails the write and leaves h covering nothing.
func TestAppendJSONKeepingRejectsWhatAppendJSONRejects(t *testing.T) {
	t.Parallel()
	cp := fullCheckpoint()
	var h HistoryEncoding
	_, err := cp.AppendJSONKeeping(nil, &h)
	require.NoError(t, err)
	require.Len(t, h.ts, len(cp.History))
	cp.History = append(cp.History, Transition{At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)})
	_, err = cp.AppendJSONKeeping(nil, &h)
	require.Error(t, err)
	require.Empty(t, h.ts)
	require.Empty(t, h.b)
}

// BenchmarkHistoryKeeping: a capsule's nine writes, one transition more at
// each, encoded in full and with the kept history.
func BenchmarkHistoryKeeping(b *testing.B) {
	at := time.Date(2026, 11, 22, 7, 8, 9, 123456789, time.UTC)
	cp := &Checkpoint{
		SchemaVersion: CheckpointSchemaVersion, CapsuleID: "0f8fad5b-d9cb-469f-a165-70867728950e", Key: "0f8fad5b-d9cb-469f-a165-70867728950e",
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Digest: "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		CreatedAt: at, UpdatedAt: at,
		State: CheckpointState{Phase: Execution, PhaseName: "EXECUTION", Status: InProgress, Cycle: 1,
			LocksHeld: []string{"repo:sagad/capsule"}, ArtifactRefs: []string{"artifact:0f8fad5b-d9cb-469f-a165-70867728950e/1"}},
	}
	var ts []Transition
	for i := range 9 {
		ph := Phase(i % 7)
		ts = append(ts, Transition{Phase: ph, PhaseName: ph.String(), Cycle: 1, Outcome: OutcomePassed, At: cp.CreatedAt.Add(time.Duration(i) * 1234567 * time.Microsecond)})
	}
	b.Run("AppendJSON", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			for i := 1; i <= len(ts); i++ {
				cp.History = ts[:i:i]
				buf, _ = cp.AppendJSON(buf[:0])
			}
		}
	})
	b.Run("AppendJSONKeeping", func(b *testing.B) {
		var buf []byte
		var h HistoryEncoding
		for b.Loop() {
			for i := 1; i <= len(ts); i++ {
				cp.History = ts[:i:i]
				buf, _ = cp.AppendJSONKeeping(buf[:0], &h)
			}
		}
	})
}
