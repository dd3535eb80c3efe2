package capsule

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func fullCheckpoint() *Checkpoint {
	at := time.Date(2026, 11, 22, 7, 8, 9, 123456789, time.UTC)
	since := at.Add(-time.Minute)
	deadline := at.Add(time.Hour).In(time.FixedZone("X", 3600))
	return &Checkpoint{
		SchemaVersion: "1.0", CapsuleID: "01J00000000000000000000000", Key: "k", TraceID: "t<&>",
		TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", TraceProducerSpan: "00f067aa0ba902b7",
		Run: 2, CycleBase: 3, ReplayToken: "rt",
		WaveID: "w", Producer: "alice", Chain: &ChainStep{ID: "c\"1", Step: 2, Run: 3, Gate: GateOperator}, Digest: "d", Constitution: "2026.11.3+0123abcd", Parent: "p\"1", Depth: 3, ChildLimit: &ChildLimit{MaxAttempts: 3, WallUntil: &deadline}, IntakeSeq: 42, OutcomeEmitted: true, CreatedAt: at, UpdatedAt: at.Add(time.Second),
		State: CheckpointState{
			Phase: ReviewPhase, PhaseName: "REVIEW", Progress: 71, Cycle: 2, Status: Halted, HaltReason: "max_cycles_exceeded:3",
			BudgetUsed: Usage{Tokens: 12, Dollars: 0.1, Estimated: true}, LocksHeld: []string{"a", "b\"c"}, ArtifactRefs: []string{"artifact:x/1"},
			Findings:  []Finding{{Rule: 9, Title: "x", Field: "f", Message: "m\n", Source: "operator", Severity: "major"}},
			Reviews:   []ReviewEntry{{Cycle: 1, ReviewerID: "r", Verdict: ChangesRequested, Findings: []Finding{{Rule: 20, Title: "t", Field: "g", Message: "fix", Source: "operator", Severity: "minor"}}, Usage: Usage{Tokens: 3, Dollars: 0.02, Estimated: true}, At: at}},
			Execution: &ExecutionClaim{Cycle: 2, Holder: "h/1", ExpiresAt: at, CallTokenHash: "ab"},
			Result:    &ExecutionResult{Cycle: 2, ArtifactRef: "artifact:x/2", Usage: Usage{Tokens: 1, Dollars: 1e-7, Estimated: true}, Failed: "boom"},
			Attempts:  &ExecutionAttempts{Cycle: 2, Phase: ReviewPhase, Failed: 1, LastFailure: AttemptFailure{ExitCode: 12, Timeout: true, Error: "e", StderrTail: "t"}},
			AttemptLog: []FailedAttempt{
				{Phase: Execution, Cycle: 1, Attempt: 1, ExitCode: 12, Error: "e\u2028", Decision: AttemptRetried, At: at},
				{Phase: ReviewPhase, Cycle: 2, Attempt: 1, ExitCode: 1, Timeout: true, Error: "<t>", Decision: AttemptHalted, At: at.Add(time.Millisecond)},
			},
			Pause:     &PauseInfo{Trigger: TriggerOperatorManual, Reason: "r", By: "me", At: at, ResumeToken: "tok"},
			Overrides: &Overrides{Tokens: 5, Dollars: 2.5, Deadline: &deadline},
			Warned:    []Trigger{TriggerBudgetWarning}, LockWaitSince: &since, AwaitingCycle: 2,
			AwaitingTokenHash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
			WaveReserved:      &Usage{Tokens: 1000, Dollars: 0.5, Estimated: true},
			AwaitingUntil:     &deadline, WaitingFor: []string{"dep-1", "wave\"2"},
			OperatorAnswer: &OperatorAnswer{Text: "licence is \"MIT\"", By: "ann", At: at},
			Answers:        []OperatorAnswer{{Text: "use v2", By: "ann", At: at}, {Text: "licence is \"MIT\"", At: at}},
			AgentQueries: []AgentQuery{{ID: "q1", ReplySubject: "_INBOX.q.1", Prompt: "may I \"push\"?", Agent: "claude.ann.s1",
				Phase: Execution, Cycle: 1, At: at}},
		},
		History: []Transition{
			{Phase: Reception, PhaseName: "RECEPTION", Cycle: 0, Outcome: OutcomePassed, At: at},
			{Phase: Execution, PhaseName: "EXECUTION", Cycle: 1, Outcome: OutcomeHalted, Detail: "executor_failed:\u2028\x01", Run: 2, At: at.Add(time.Nanosecond)},
		},
	}
}

func TestAppendJSONRejectsWhatEncodingJSONRejects(t *testing.T) {
	t.Parallel()
	cp := fullCheckpoint()
	cp.State.BudgetUsed.Dollars = math.NaN()
	_, err := cp.AppendJSON(nil)
	require.Error(t, err)
	cp = fullCheckpoint()
	cp.UpdatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	_, err = cp.AppendJSON(nil)
	require.Error(t, err)
}

func BenchmarkCheckpointEncode(b *testing.B) {
	cp := fullCheckpoint()
	cp.State.Findings, cp.State.Pause, cp.State.Overrides, cp.State.Warned = nil, nil, nil, nil
	for i := 0; i < 5; i++ {
		cp.History = append(cp.History, cp.History[0])
	}
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(cp); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AppendJSON", func(b *testing.B) {
		for b.Loop() {
			if _, err := cp.AppendJSON(nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	// As the store encodes: into a buffer it keeps.
	b.Run("AppendJSON/reused", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			var err error
			if buf, err = cp.AppendJSON(buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestFullCheckpointSetsEveryField guards the hand-written encoder: a field
// added to Checkpoint that the encoder does not know would be dropped
// silently, and TestCheckpointAppendJSON sees that only if fullCheckpoint sets
// the field. So fullCheckpoint must set every field, nested ones included.
func TestFullCheckpointSetsEveryField(t *testing.T) {
	t.Parallel()
	var walk func(path string, v reflect.Value)
	walk = func(path string, v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			require.False(t, v.IsNil(), "fullCheckpoint leaves %s unset: set it (and teach AppendJSON if needed)", path)
			walk(path, v.Elem())
		case reflect.Struct:
			if v.Type() == reflect.TypeFor[time.Time]() {
				require.False(t, v.Interface().(time.Time).IsZero(), "fullCheckpoint leaves %s unset", path)
				return
			}
			for i := range v.NumField() {
				f := v.Type().Field(i)
				if !f.IsExported() || f.Tag.Get("json") == "-" {
					continue
				}
				walk(path+"."+f.Name, v.Field(i))
			}
		case reflect.Slice:
			require.NotZero(t, v.Len(), "fullCheckpoint leaves %s empty: give it an element", path)
			found := false
			for i := range v.Len() {
				// One fully set element is enough; elements may differ.
				if allSet(v.Index(i)) {
					found = true
				}
			}
			require.True(t, found, "no element of %s sets every field", path)
		default:
			if path == "Checkpoint.State.Phase" || strings.HasSuffix(path, ".Cycle") && v.Kind() == reflect.Int {
				return // 0 is a real value (RECEPTION, cycle 0)
			}
			require.False(t, v.IsZero(), "fullCheckpoint leaves %s zero: set it (and teach AppendJSON if needed)", path)
		}
	}
	walk("Checkpoint", reflect.ValueOf(fullCheckpoint()))
}

// allSet reports whether v and everything in it is non-zero (cycles and
// phases excepted, where 0 is a real value).
func allSet(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Pointer:
		return !v.IsNil() && allSet(v.Elem())
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			return !v.Interface().(time.Time).IsZero()
		}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() || f.Tag.Get("json") == "-" || f.Name == "Cycle" || f.Name == "Phase" {
				continue
			}
			if !allSet(v.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice:
		if v.Len() == 0 {
			return false
		}
		for i := range v.Len() {
			if allSet(v.Index(i)) {
				return true
			}
		}
		return false
	default:
		return !v.IsZero()
	}
}

// BenchmarkCheckpointDecode reads a valid capsule's last checkpoint as
// stored (compact) and as encoding/json writes it (records written before).
func BenchmarkCheckpointDecode(b *testing.B) {
	cp := fullCheckpoint()
	cp.State.Findings, cp.State.Pause, cp.State.Overrides, cp.State.Warned = nil, nil, nil, nil
	cp.Key, cp.TraceID = cp.CapsuleID, cp.TraceParent[3:35]
	cp.History = nil
	for p := Reception; p < NumPhases; p++ {
		cp.History = append(cp.History, Transition{Phase: p, PhaseName: p.String(), Outcome: OutcomePassed, At: cp.CreatedAt})
	}
	compact, err := cp.AppendJSON(nil)
	require.NoError(b, err)
	full, err := json.Marshal(cp)
	require.NoError(b, err)
	for name, raw := range map[string][]byte{"stored": compact, "encoding/json": full} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				var c Checkpoint
				if err := json.Unmarshal(raw, &c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
