package capsule

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
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

// TestAppendJSONKeepingMatchesAppendJSON: one KeptEncoding carried
// over thousands of writes of changing histories writes, at every write,
// AppendJSON's bytes (and encoding/json's), whether it could reuse its
// bytes or not; the caller's slice changed in place after a write does not
// reach what it keeps.
func TestAppendJSONKeepingMatchesAppendJSON(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	cp := fullCheckpoint()
	at := cp.CreatedAt
	var h KeptEncoding
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
		if r.IntN(8) == 0 {
			changeHeadMember(cp, headMembers()[r.IntN(len(headMembers()))], r.IntN(4))
		}
		if len(cp.History) > 30 {
			cp.History = cp.History[:0:0]
		}
	}
}

// headMembers are the indexes of Checkpoint's fields written before
// updated_at: all but updated_at, the state and the history.
func headMembers() []int {
	var out []int
	ty := reflect.TypeFor[Checkpoint]()
	for i := range ty.NumField() {
		switch ty.Field(i).Name {
		case "UpdatedAt", "State", "History":
		default:
			out = append(out, i)
		}
	}
	return out
}

// changeHeadMember changes cp's field i; in a ChainStep, its sub-field sub
// (modulo their number) in place.
func changeHeadMember(cp *Checkpoint, i, sub int) {
	f := reflect.ValueOf(cp).Elem().Field(i)
	if f.Kind() == reflect.Pointer {
		if f.IsNil() {
			f.Set(reflect.New(f.Type().Elem()))
		}
		f = f.Elem()
		f = f.Field(sub % f.NumField())
	}
	changeValue(f)
}

// changeValue gives v another value of its kind.
func changeValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Int:
		v.SetInt(v.Int() + 1)
	case reflect.Uint64:
		v.SetUint(v.Uint() + 1)
	case reflect.Bool:
		v.SetBool(!v.Bool())
	default:
		t := v.Interface().(time.Time)
		v.Set(reflect.ValueOf(t.Add(time.Nanosecond)))
	}
}

// TestCheckpointHeadHoldsEveryMemberBeforeUpdatedAt guards the kept head:
// a field added to Checkpoint that checkpointHead does not copy would let
// a write reuse bytes encoded for another value. Every field but
// updated_at, the state and the history, and each of the chain step's,
// changed after a write (the chain step in place), is re-encoded.
func TestCheckpointHeadHoldsEveryMemberBeforeUpdatedAt(t *testing.T) {
	t.Parallel()
	for _, i := range headMembers() {
		subs := 1
		if f := reflect.TypeFor[Checkpoint]().Field(i); f.Type.Kind() == reflect.Pointer {
			subs = f.Type.Elem().NumField()
		}
		for sub := range subs {
			cp := fullCheckpoint()
			var k KeptEncoding
			_, err := cp.AppendJSONKeeping(nil, &k)
			require.NoError(t, err)
			before := cp.headOf()
			changeHeadMember(cp, i, sub)
			name := reflect.TypeFor[Checkpoint]().Field(i).Name
			require.NotEqual(t, before, cp.headOf(), "%s/%d", name, sub)
			want, err := cp.AppendJSON(nil)
			require.NoError(t, err)
			got, err := cp.AppendJSONKeeping(nil, &k)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got), "%s/%d", name, sub)
		}
	}
	cp := fullCheckpoint()
	var k KeptEncoding
	_, err := cp.AppendJSONKeeping(nil, &k)
	require.NoError(t, err)
	cp.Chain = nil
	want, err := cp.AppendJSON(nil)
	require.NoError(t, err)
	got, err := cp.AppendJSONKeeping(nil, &k)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "no chain any more")
}

// TestAppendJSONKeepingRejectsWhatAppendJSONRejects: a transition that
// cannot be encoded fails the write and leaves h covering no transition;
// a created_at that cannot, no head.
func TestAppendJSONKeepingRejectsWhatAppendJSONRejects(t *testing.T) {
	t.Parallel()
	cp := fullCheckpoint()
	var h KeptEncoding
	_, err := cp.AppendJSONKeeping(nil, &h)
	require.NoError(t, err)
	require.Len(t, h.ts, len(cp.History))
	cp.History = append(cp.History, Transition{At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)})
	_, err = cp.AppendJSONKeeping(nil, &h)
	require.Error(t, err)
	require.Empty(t, h.ts)
	require.Empty(t, h.b)
	require.True(t, h.headOK)

	cp = fullCheckpoint()
	cp.CreatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	_, err = cp.AppendJSONKeeping(nil, &h)
	require.Error(t, err)
	require.False(t, h.headOK, "nothing kept of a head that failed")
}

// BenchmarkKeptEncoding: a capsule's nine writes, one transition more at
// each, encoded in full and with the kept history.
func BenchmarkKeptEncoding(b *testing.B) {
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
		var h KeptEncoding
		for b.Loop() {
			for i := 1; i <= len(ts); i++ {
				cp.History = ts[:i:i]
				buf, _ = cp.AppendJSONKeeping(buf[:0], &h)
			}
		}
	})
}
