package capsule

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/differential"
)

// differentialPairs are this package's fast paths, each held to the
// routine it replaces by the shared harness (internal/differential): one
// table test runs them all, and each has its fuzz target below.
var differentialPairs = differential.Registry{
	appendStringPair, appendTimePair, checkpointCodecPair, checkpointOldRecordsPair,
	scannerPair, documentDigestPair, compactTransitionPair, civilPair, traceIDOfPair, appendFloatPair,
}

func TestDifferential(t *testing.T) {
	t.Parallel()
	differential.RunAll(t, differentialPairs)
}

func FuzzAppendString(f *testing.F)         { differential.Fuzz(f, appendStringPair) }
func FuzzAppendTime(f *testing.F)           { differential.Fuzz(f, appendTimePair) }
func FuzzDecodeCheckpoint(f *testing.F)     { differential.Fuzz(f, checkpointCodecPair) }
func FuzzCheckpointOldRecords(f *testing.F) { differential.Fuzz(f, checkpointOldRecordsPair) }
func FuzzCompactTransition(f *testing.F)    { differential.Fuzz(f, compactTransitionPair) }

// appendStringPair: any string encodes as encoding/json encodes it. The
// generator draws short strings of every escape and longer ones, mostly
// plain ASCII with a rare byte that needs care, so that every offset of an
// escape within a word of plain bytes is met.
var appendStringPair = differential.Pair[string, string]{
	Name:      "AppendString",
	Fast:      func(s string) (string, error) { return string(appendString([]byte("x"), s)[1:]), nil },
	Reference: func(s string) (string, error) { b, err := json.Marshal(s); return string(b), err },
	Seeds: append(append([]string{}, checkpointStrings...),
		"", "a\u2028b", "<&>", "\xff\xfe", "tab\there", "01234567\"9abcdef", "0123456789abcde\x01"),
	Generate: func(r *rand.Rand) string {
		if r.IntN(5) == 0 {
			alphabet := []string{"a", "é", "\u2028", "\u2029", "<", ">", "&", "\"", "\\", "\n", "\r", "\t", "\x00", "\x1f", "\b", "\f", "\x7f", "\xff", "\xe2\x82", "😀", "\ufffd"}
			var s string
			for n := r.IntN(12); n > 0; n-- {
				s += alphabet[r.IntN(len(alphabet))]
			}
			return s
		}
		rare := []string{"é", "\u2028", "\u2029", "<", ">", "&", "\"", "\\", "\n", "\x00", "\x1f", "\x7f", "\xff", "\xe2\x80", "\xe2\x80\xa8"[:2], "😀", "\ufffd", "\xc0\x80", "\xed\xa0\x80"}
		var sb strings.Builder
		for n := r.IntN(40); n > 0; n-- {
			if r.IntN(8) == 0 {
				sb.WriteString(rare[r.IntN(len(rare))])
			} else {
				sb.WriteByte(byte(0x20 + r.IntN(0x60)))
			}
		}
		return sb.String()
	},
	Count:  25000,
	Decode: func(b []byte) (string, bool) { return string(b), true },
	Encode: func(s string) []byte { return []byte(s) },
}

// appendTimePair: the UTC fast path writes what time.Time.MarshalJSON
// writes, fractions with trailing zeros and the zero time included, other
// zones take the general path, and both refuse years past 9999 or before 0.
var appendTimePair = differential.Pair[time.Time, string]{
	Name: "AppendTime",
	Fast: func(tm time.Time) (string, error) { b, err := appendTime(nil, tm); return string(b), err },
	Reference: func(tm time.Time) (string, error) {
		b, err := tm.MarshalJSON()
		return string(b), err
	},
	Seeds: []time.Time{
		{},
		time.Unix(0, 0).UTC(),
		time.Date(2026, 11, 25, 20, 57, 8, 0, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 100_000_000, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 120_000_000, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 1, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("X", 3600)),
		time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("UTC", 0)),
		time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("far", 25*3600)),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Now(),
		time.Now().UTC(),
	},
	Generate: func(r *rand.Rand) time.Time { return time.Unix(r.Int64N(253402300799), r.Int64N(1e9)).UTC() },
	Count:    2000,
	// Seconds and nanoseconds, then a zone offset in minutes (absent: UTC).
	Decode: func(b []byte) (time.Time, bool) {
		if len(b) < 12 {
			return time.Time{}, false
		}
		tm := time.Unix(int64(binary.LittleEndian.Uint64(b)), int64(binary.LittleEndian.Uint32(b[8:])%1e9)).UTC()
		if len(b) >= 14 {
			tm = tm.In(time.FixedZone("z", int(int16(binary.LittleEndian.Uint16(b[12:])))*60))
		}
		return tm, true
	},
	Encode: func(tm time.Time) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(tm.Unix()))
		b = binary.LittleEndian.AppendUint32(b, uint32(tm.Nanosecond()))
		if _, off := tm.Zone(); tm.Location() != time.UTC {
			b = binary.LittleEndian.AppendUint16(b, uint16(int16(off/60)))
		}
		return b
	},
}

// decoded is a checkpoint as a reader gets it back from bytes, and the
// bytes.
type decoded struct {
	cp  *Checkpoint
	raw []byte
}

// checkpointCodecPair: what AppendJSON writes (key, trace_id and
// transitions compacted where a reader makes them again) decodes to what
// encoding/json's encoding decodes to, fails exactly when encoding/json
// does, and decodes back to an encoding of itself.
var checkpointCodecPair = differential.Pair[*Checkpoint, decoded]{
	Name:      "CheckpointCodec",
	Fast:      func(cp *Checkpoint) (decoded, error) { b, err := cp.AppendJSON(nil); return decodeBack(b, err) },
	Reference: func(cp *Checkpoint) (decoded, error) { b, err := json.Marshal(cp); return decodeBack(b, err) },
	Compare: func(t testing.TB, _ *Checkpoint, fast, ref decoded) {
		require.Equal(t, ref.cp, fast.cp, "AppendJSON wrote %s", fast.raw)
		// What is read back writes what reads back as itself (the first
		// write may differ: invalid UTF-8 is read back as U+FFFD).
		again, err := fast.cp.AppendJSON(nil)
		require.NoError(t, err)
		back, err := decodeBack(again, nil)
		require.NoError(t, err)
		require.Equal(t, fast.cp, back.cp)
		third, err := back.cp.AppendJSON(nil)
		require.NoError(t, err)
		require.Equal(t, string(again), string(third))
		require.True(t, reflect.DeepEqual(fast.cp.Clone(), fast.cp), "Clone differs from the checkpoint")
	},
	Seeds:    checkpointSeeds(),
	Generate: randomCheckpoint,
	Count:    3000,
	Decode: func(b []byte) (*Checkpoint, bool) {
		cp := new(Checkpoint)
		return cp, json.Unmarshal(b, cp) == nil
	},
	Encode: func(cp *Checkpoint) []byte { b, _ := json.Marshal(cp); return b },
}

func decodeBack(b []byte, err error) (decoded, error) {
	if err != nil {
		return decoded{}, err
	}
	cp := new(Checkpoint)
	if err := json.Unmarshal(b, cp); err != nil {
		return decoded{}, err
	}
	return decoded{cp, b}, nil
}

// checkpointOldRecordsPair: a record written before checkpoints were
// compacted (encoding/json's, with key, trace_id and every transition an
// object) decodes as encoding/json decoded it then.
var checkpointOldRecordsPair = differential.Pair[[]byte, *Checkpoint]{
	Name: "CheckpointOldRecords",
	Fast: func(b []byte) (*Checkpoint, error) {
		cp := new(Checkpoint)
		return cp, json.Unmarshal(b, cp)
	},
	Reference: func(b []byte) (*Checkpoint, error) {
		cp := new(plainCheckpoint) // the object transitions go to encoding/json as they did
		return (*Checkpoint)(cp), json.Unmarshal(b, cp)
	},
	Seeds: func() [][]byte {
		var out [][]byte
		for _, cp := range checkpointSeeds() {
			if b, err := json.Marshal(cp); err == nil {
				out = append(out, b)
			}
		}
		return out
	}(),
	Generate: func(r *rand.Rand) []byte { b, _ := json.Marshal(randomCheckpoint(r)); return b },
	Count:    3000,
	Decode: func(b []byte) ([]byte, bool) {
		var m struct {
			Key     *string           `json:"key"`
			TraceID *string           `json:"trace_id"`
			History []json.RawMessage `json:"history"`
		}
		if json.Unmarshal(b, &m) != nil || m.Key == nil || m.TraceID == nil {
			return nil, false
		}
		for _, h := range m.History {
			if len(h) > 0 && h[0] == '[' {
				return nil, false // the new encoding
			}
		}
		return b, true
	},
	Encode: func(b []byte) []byte { return b },
}

// checkpointSeeds are whole checkpoints: sparse, full, at the limits of
// their numbers and times, and the fuzz target's first seeds.
func checkpointSeeds() []*Checkpoint {
	seeds := []*Checkpoint{
		{},
		fullCheckpoint(),
		{History: []Transition{}, State: CheckpointState{LocksHeld: []string{}}},
	}
	for _, d := range []float64{0, 1, -2.5, 1e-7, 1e21, 123456789.125, 5e-324, math.MaxFloat64, 0.000001, math.NaN()} {
		cp := fullCheckpoint()
		cp.State.BudgetUsed.Dollars = d
		seeds = append(seeds, cp)
	}
	cp := fullCheckpoint()
	cp.UpdatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	seeds = append(seeds, cp)
	for _, tp := range []string{"", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"} {
		cp := fullCheckpoint()
		cp.TraceParent = tp
		seeds = append(seeds, cp)
	}
	full := `{"schema_version":"1.0","capsule_id":"c","key":"k","trace_id":"t<&>","wave_id":"w","digest":"d","constitution":"2026.11.3+0123abcd","intake_seq":42,"outcome_emitted":true,` +
		`"created_at":"2026-11-22T07:08:09.123456789Z","updated_at":"2026-11-22T07:08:10+01:00",` +
		`"state":{"phase":5,"phase_name":"REVIEW","progress":71,"cycle":2,"status":"halted","halt_reason":"max_cycles_exceeded:3",` +
		`"budget_used":{"tokens":12,"dollars":1e-7},"locks_held":["a","b\"c"],"artifact_refs":[],"findings":[{"rule":9,"title":"x","field":"f","message":"m\n","source":"operator"}],"operator_answer":{"text":"licence is MIT","by":"ann","at":"2026-11-22T07:08:09Z"},` +
		`"pause":{"trigger":"operator_manual","reason":"r","by":"me","at":"2026-11-22T07:08:09Z","resume_token":"tok"},"warned":["budget_warning"],"awaiting_cycle":2,` +
		`"attempt_log":[{"phase":4,"cycle":1,"attempt":1,"exit_code":12,"error":"e","decision":"retry","at":"2026-11-22T07:08:09Z"},{"phase":5,"cycle":2,"attempt":3,"timeout":true,"error":"","decision":"halt","at":"2026-11-22T07:08:09+01:00"}]},` +
		`"history":[{"phase":0,"phase_name":"RECEPTION","cycle":0,"outcome":"passed","detail":"\u2028\u0001","at":"2026-11-22T07:08:09Z"}]}`
	for _, s := range []string{full, `{}`, `null`, `{"child_limit":{"max_attempts":2,"wall_until":"2026-11-22T07:08:09+01:00"}}`, `{"child_limit":{}}`, `{"child_limit":{"wall_until":"2026-11-22T07:08:09.5Z"}}`, `{"history":[]}`, `{"created_at":"0000-01-01T00:00:00-00:01"}`, `{"state":{"budget_used":{"dollars":1e308}}}`,
		`{"capsule_id":"c","trace_parent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","history":[[1,0,"passed","2026-11-22T07:08:09Z"],[4,2,"halted","2026-11-22T07:08:09Z","x",2],null]}`} {
		cp := new(Checkpoint)
		if json.Unmarshal([]byte(s), cp) == nil {
			seeds = append(seeds, cp)
		}
	}
	return seeds
}

// randomCheckpoint varies what the compact encoding depends on: whether
// key is capsule_id, whether trace_id is trace_parent's (and whether that
// is canonical), and each transition's phase, name, detail and run.
func randomCheckpoint(r *rand.Rand) *Checkpoint {
	pick := func(ss ...string) string { return ss[r.IntN(len(ss))] }
	cp := fullCheckpoint()
	cp.CapsuleID = pick("", "c", "0f8fad5b-d9cb-469f-a165-70867728950e", "\xff", "é")
	cp.Key = pick(cp.CapsuleID, cp.CapsuleID, "", "k", "\xfe")
	tid := pick("0af7651916cd43dd8448eb211c80319c", "0AF7651916CD43DD8448EB211C80319C", "0af7651916cd43dd8448eb211c8031\xff", "0af765")
	cp.TraceParent = pick("", "00-"+tid+"-b7ad6b7169203331-01", "01-"+tid+"-b7ad6b7169203331-01", "00-"+tid+"-b7ad6b7169203331-0")
	cp.TraceID = pick(tid, tid, "", "t")
	if r.IntN(4) == 0 {
		cp.History = nil
	}
	for range r.IntN(9) {
		p := Phase(r.IntN(int(NumPhases)+2) - 1)
		tr := Transition{Phase: p, PhaseName: p.String(), Cycle: r.IntN(4), Outcome: pick(OutcomePassed, OutcomeHalted, OutcomeCompleted, "", "\u2028"),
			At: time.Unix(r.Int64N(4e9), r.Int64N(1e9)).In(time.FixedZone("z", 60*(r.IntN(121)-60)))}
		if r.IntN(5) == 0 {
			tr.PhaseName = pick("", "X", "RECEPTION")
		}
		if r.IntN(3) == 0 {
			tr.Detail = pick("", "executor_failed:\x01", "d")
			tr.Run = r.IntN(3)
		}
		cp.History = append(cp.History, tr)
	}
	return cp
}

// compactTransitionPair: the hand reader of a compact transition reads
// what encoding/json reads element by element into the fields, and fails
// where it does (a null, a list of another length, a value of another
// type).
var compactTransitionPair = differential.Pair[[]byte, Transition]{
	Name: "CompactTransition",
	Fast: func(b []byte) (Transition, error) {
		var t Transition
		return t, t.UnmarshalJSON(b)
	},
	Reference: func(b []byte) (Transition, error) {
		var parts []json.RawMessage
		if err := json.Unmarshal(b, &parts); err != nil {
			return Transition{}, err
		}
		if len(parts) != 4 && len(parts) != 6 {
			return Transition{}, errCompactTransition
		}
		var x Transition
		fields := []any{&x.Phase, &x.Cycle, &x.Outcome, &x.At, &x.Detail, &x.Run}
		for i, p := range parts {
			if string(p) == "null" {
				return Transition{}, errCompactTransition
			}
			if err := json.Unmarshal(p, fields[i]); err != nil {
				return Transition{}, err
			}
		}
		x.PhaseName = x.Phase.String()
		return x, nil
	},
	Seeds: func() (out [][]byte) {
		for _, s := range []string{
			`[0,0,"passed","2026-11-22T07:08:09.123456789Z"]`, `[6,1,"completed","2026-11-22T07:08:09Z","",2]`,
			`[ 4 , 2 , "halted" , "2026-11-22T07:08:09+01:00" , "executor_failed:\u2028\u0001" , 0 ]`,
			"[1,0,\"\xff\",\"2026-11-22T07:08:09Z\"]", `[1,0,"a\"b","2026-11-22T07:08:09Z"]`, `[-1,-0,"","0001-01-01T00:00:00Z"]`,
			`[]`, `[1]`, `[1,0,"p"]`, `[1,0,"p","2026-11-22T07:08:09Z","d"]`, `[1,0,"p","2026-11-22T07:08:09Z","d",1,2]`,
			`[null,0,"p","2026-11-22T07:08:09Z"]`, `[1,0,null,"2026-11-22T07:08:09Z"]`, `[1.0,0,"p","2026-11-22T07:08:09Z"]`,
			`[1e2,0,"p","2026-11-22T07:08:09Z"]`, `[99999999999999999999,0,"p","2026-11-22T07:08:09Z"]`, `[1,0,"p","2026-13-22T07:08:09Z"]`,
			`[1,0,"p",5]`, `[1,0,5,"2026-11-22T07:08:09Z"]`, `["1",0,"p","2026-11-22T07:08:09Z"]`, `[true,0,"p","2026-11-22T07:08:09Z"]`,
			`[[1],0,"p","2026-11-22T07:08:09Z"]`, `[1,0,"p","\u0032026-11-22T07:08:09Z"]`, `[1,0,"p","2026-11-22T07:08:09Z",{},1]`,
		} {
			out = append(out, []byte(s))
		}
		return out
	}(),
	Generate: func(r *rand.Rand) []byte {
		b, _ := (&Transition{Phase: Phase(r.IntN(9) - 1), Cycle: r.IntN(5), Outcome: pickString(r), Detail: pickString(r), Run: r.IntN(3),
			At: time.Unix(r.Int64N(4e9), r.Int64N(1e9)).In(time.FixedZone("z", 60*(r.IntN(121)-60)))}).appendCompact(nil)
		return b
	},
	Count: 2000,
	// Any JSON array (encoding/json hands UnmarshalJSON a valid value).
	Decode: func(b []byte) ([]byte, bool) {
		t := bytes.TrimSpace(b)
		return t, len(t) > 0 && t[0] == '[' && json.Valid(t)
	},
	Encode: func(b []byte) []byte { return b },
}

func pickString(r *rand.Rand) string {
	return []string{"", "passed", "\u2028", "a\"b\\", "\xff", "é", "executor_failed:\x01"}[r.IntN(7)]
}
