package capsule

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAppendJSONReusingMatchesEncodingJSON drives one HistoryEncoding
// through histories that grow, as sagad's do, and through everything else a
// history could do between two writes (an earlier transition edited in
// place or replaced, the history cut, emptied, made nil, swapped for
// another capsule's, a transition that cannot be encoded): after every step
// the reusing encoder writes exactly what encoding/json writes.
func TestAppendJSONReusingMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	var h HistoryEncoding
	cp := fullCheckpoint()
	for step := range 20000 {
		mutateHistory(r, cp)
		want, werr := json.Marshal(cp)
		got, gerr := cp.AppendJSONReusing(nil, &h)
		require.Equal(t, werr == nil, gerr == nil, "step %d: encoding/json %v, reusing %v", step, werr, gerr)
		if werr == nil {
			require.Equal(t, string(want), string(got), "step %d", step)
		}
	}
}

// mutateHistory changes cp's history as one of the cases above.
func mutateHistory(r *rand.Rand, cp *Checkpoint) {
	n := len(cp.History)
	switch k := r.IntN(20); {
	case k < 12 || n == 0: // the common case: one more transition
		cp.History = append(cp.History, randomTransition(r))
	case k == 12: // an earlier transition edited in place
		editTransition(r, &cp.History[r.IntN(n)])
	case k == 13: // replaced, in a new array
		hs := append([]Transition(nil), cp.History...)
		hs[r.IntN(n)] = randomTransition(r)
		cp.History = hs
	case k == 14:
		cp.History = cp.History[:r.IntN(n)]
	case k == 15:
		cp.History = nil
	case k == 16:
		cp.History = []Transition{}
	case k == 17: // another capsule's history
		cp.History = []Transition{randomTransition(r), randomTransition(r)}
	case k == 18: // a transition encoding/json refuses
		cp.History = append(cp.History, Transition{At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)})
	default: // the same history again
	}
	if n := len(cp.History); n > 0 && cp.History[n-1].At.Year() >= 10000 && r.IntN(2) == 0 {
		cp.History = cp.History[:n-1]
	}
}

func randomTransition(r *rand.Rand) Transition {
	t := Transition{Phase: Phase(r.IntN(7)), Cycle: r.IntN(4), Outcome: OutcomePassed, At: time.Unix(1_790_000_000+r.Int64N(1e6), r.Int64N(1e9)).UTC()}
	t.PhaseName = t.Phase.String()
	if r.IntN(4) == 0 {
		t.Outcome, t.Detail = OutcomeHalted, "executor_failed:<"+strconv.Itoa(r.IntN(100))+">\u2028"
	}
	if r.IntN(8) == 0 {
		t.Run = 1 + r.IntN(3)
	}
	if r.IntN(8) == 0 {
		t.At = t.At.In(time.FixedZone("X", 3600))
	}
	return t
}

func editTransition(r *rand.Rand, t *Transition) {
	switch r.IntN(6) {
	case 0:
		t.Cycle++
	case 1:
		t.Detail += "x"
	case 2:
		t.At = t.At.Add(time.Nanosecond)
	case 3:
		t.At = t.At.In(time.FixedZone("Y", -7200)) // the same instant, another zone
	case 4:
		t.Run++
	default:
		t.PhaseName += "!"
	}
}

// BenchmarkCheckpointEncodeHistory: a capsule's checkpoint writes, one
// transition more at each (nine), encoded whole and reusing the history's
// encoding (its memory kept from capsule to capsule, as the store does).
func BenchmarkCheckpointEncodeHistory(b *testing.B) {
	at := time.Date(2026, 11, 22, 7, 8, 9, 123456789, time.UTC)
	cp := &Checkpoint{
		SchemaVersion: "1.0", CapsuleID: "0f8fad5b-d9cb-469f-a165-70867728950e", Key: "0f8fad5b-d9cb-469f-a165-70867728950e",
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Digest: "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		Constitution: "2026.11.3+0123abcd", IntakeSeq: 42, CreatedAt: at, UpdatedAt: at,
		State: CheckpointState{Phase: ReviewPhase, PhaseName: "REVIEW", Progress: 71, Cycle: 1, Status: InProgress,
			LocksHeld: []string{"repo:sagad/capsule"}, ArtifactRefs: []string{"artifact:0f8fad5b-d9cb-469f-a165-70867728950e/1"},
			Result: &ExecutionResult{Cycle: 1, ArtifactRef: "artifact:0f8fad5b-d9cb-469f-a165-70867728950e/1", Usage: Usage{Tokens: 1200, Dollars: 0.012}}},
	}
	r := rand.New(rand.NewPCG(1, 1))
	var ts []Transition
	for range 9 {
		t := randomTransition(r)
		t.Outcome, t.Detail, t.Run, t.At = OutcomePassed, "", 0, t.At.UTC()
		ts = append(ts, t)
	}
	for _, reuse := range []bool{false, true} {
		b.Run("reusing="+strconv.FormatBool(reuse), func(b *testing.B) {
			var buf []byte
			var h HistoryEncoding
			for b.Loop() {
				h.Reset()
				for i := 1; i <= len(ts); i++ {
					cp.History = ts[:i:i]
					var err error
					if reuse {
						buf, err = cp.AppendJSONReusing(buf[:0], &h)
					} else {
						buf, err = cp.AppendJSON(buf[:0])
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
