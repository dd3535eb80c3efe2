package schemas_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/schemas"
)

func validCapsule(t *testing.T) []byte {
	t.Helper()
	raw, err := os.ReadFile("testdata/capsule_valid.json")
	require.NoError(t, err)
	return raw
}

func TestSources(t *testing.T) {
	t.Parallel()
	for _, name := range schemas.Names() {
		t.Run(string(name), func(t *testing.T) {
			t.Parallel()
			var doc map[string]any
			require.NoError(t, json.Unmarshal(schemas.Source(name), &doc))
			require.Equal(t, "https://json-schema.org/draft/2020-12/schema", doc["$schema"])
			require.Equal(t, "https://sagad.dev/schemas/"+string(name)+".schema.json", doc["$id"])
			require.Equal(t, doc["$id"], name.URL())

			// Compiles, and rejects the empty object (every schema requires members).
			var verr *schemas.ValidationError
			require.ErrorAs(t, schemas.Validate(name, []byte(`{}`)), &verr)
			require.Equal(t, name, verr.Schema)
		})
	}
	t.Run("unknown name", func(t *testing.T) {
		t.Parallel()
		require.Nil(t, schemas.Source("nope"))
		require.Nil(t, schemas.Source("../schemas"))
		require.ErrorContains(t, schemas.Validate("nope", []byte(`{}`)), "unknown schema")
	})
}

func TestCapsuleValid(t *testing.T) {
	t.Parallel()
	raw := validCapsule(t)
	require.NoError(t, schemas.Validate(schemas.Capsule, raw))

	// The Go type round-trips into a valid capsule too.
	var c capsule.Capsule
	require.NoError(t, json.Unmarshal(raw, &c))
	require.NoError(t, schemas.ValidateValue(schemas.Capsule, c))
}

func TestCapsuleInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(c map[string]any)
		want   []string // nil: valid
	}{
		{
			name:   "missing capsule_id",
			mutate: func(c map[string]any) { delete(c, "capsule_id") },
			want:   []string{"/capsule_id"},
		},
		{
			name:   "budget.tokens is a string",
			mutate: func(c map[string]any) { obj(c, "budget")["tokens"] = "10000" },
			want:   []string{"/budget/tokens"},
		},
		{
			name:   "budget.tokens is fractional",
			mutate: func(c map[string]any) { obj(c, "budget")["tokens"] = 1.5 },
			want:   []string{"/budget/tokens"},
		},
		{
			name:   "created_at not RFC 3339",
			mutate: func(c map[string]any) { c["created_at"] = "2026-01-01 00:00:00" },
			want:   []string{"/created_at"},
		},
		{
			name:   "deadline not a date",
			mutate: func(c map[string]any) { c["deadline"] = "tomorrow" },
			want:   []string{"/deadline"},
		},
		{
			name:   "unknown top-level field",
			mutate: func(c map[string]any) { c["colour"] = "blue" },
			want:   []string{"/colour"},
		},
		{
			name:   "unknown field with pointer escapes",
			mutate: func(c map[string]any) { obj(c, "task")["a/b~c"] = 1 },
			want:   []string{"/task/a~1b~0c"},
		},
		{
			name:   "capsule_id neither UUID nor ULID",
			mutate: func(c map[string]any) { c["capsule_id"] = "capsule-42" },
			want:   []string{"/capsule_id"},
		},
		{
			name:   "network mode outside enum",
			mutate: func(c map[string]any) { obj(obj(c, "constraints"), "network")["mode"] = "open" },
			want:   []string{"/constraints/network/mode"},
		},
		{
			name: "several problems at once",
			mutate: func(c map[string]any) {
				delete(c, "spec")
				delete(obj(c, "task"), "kind")
				obj(c, "integrity")["sha256"] = strings.Repeat("A", 64)
				c["context_refs"] = nil
				c["depends_on"] = []any{"nope"}
			},
			want: []string{"/context_refs", "/depends_on/0", "/integrity/sha256", "/spec", "/task/kind"},
		},
		{
			name:   "root not an object",
			mutate: nil,
			want:   []string{"/"},
		},
		{
			name:   "ULID capsule_id",
			mutate: func(c map[string]any) { c["capsule_id"] = "01ARZ3NDEKTSV4RRFFQ69G5FAV" },
		},
		{
			name: "left to later phases",
			mutate: func(c map[string]any) {
				obj(c, "budget")["tokens"] = 0
				obj(c, "budget")["dollars"] = -1
				c["review"] = map[string]any{"max_cycles": 7}
				c["spec"] = map[string]any{"approved": false}
				c["context_refs"] = []any{}
				c["deadline"] = "2025-01-01T00:00:00Z"
				obj(c, "constraints")["network"] = map[string]any{"mode": "restricted"}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			raw := []byte(`[]`)
			if tt.mutate != nil {
				var c map[string]any
				require.NoError(t, json.Unmarshal(validCapsule(t), &c))
				tt.mutate(c)
				var err error
				raw, err = json.Marshal(c)
				require.NoError(t, err)
			}
			err := schemas.Validate(schemas.Capsule, raw)
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			var verr *schemas.ValidationError
			require.ErrorAs(t, err, &verr)
			require.Equal(t, schemas.Capsule, verr.Schema)
			require.Equal(t, tt.want, verr.Pointers, "details: %v", verr.Details)
			require.NotEmpty(t, verr.Details)
			for _, d := range verr.Details {
				require.Contains(t, err.Error(), d)
			}
		})
	}
}

func obj(m map[string]any, key string) map[string]any { return m[key].(map[string]any) }

func TestNotJSON(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"", "{", `{"a":}`, "{} {}", `{"a":1} x`, "\"\xff\"", "hello"} {
		t.Run(raw, func(t *testing.T) {
			t.Parallel()
			err := schemas.Validate(schemas.Capsule, []byte(raw))
			require.ErrorIs(t, err, schemas.ErrNotJSON)
			var verr *schemas.ValidationError
			require.False(t, errors.As(err, &verr))
		})
	}
}

// records returns fully filled instances of every record type the daemon
// writes, and the same records with every slice and optional pointer nil.
func records() map[string]struct {
	name schemas.Name
	v    any
} {
	at := time.Date(2026, 1, 1, 0, 0, 0, 123456789, time.UTC)
	usage := capsule.Usage{Tokens: 1200, Dollars: 0.42}
	findings := []capsule.Finding{
		{Rule: 20, Title: "Reviewer declared and independent", Field: "review.reviewer_agent_id", Message: "missing"},
		{Message: "nit: wording"},
	}
	full := capsule.Checkpoint{
		SchemaVersion: capsule.CheckpointSchemaVersion,
		CapsuleID:     "3f0c2a9e-7b1d-4c5e-9a8f-1b2c3d4e5f60",
		Key:           "3f0c2a9e-7b1d-4c5e-9a8f-1b2c3d4e5f60",
		TraceID:       "4bf92f3577b34da6a3ce929d0e0e4736",
		WaveID:        "wave-1",
		Digest:        strings.Repeat("ab", 32),
		CreatedAt:     at,
		UpdatedAt:     at.Add(time.Minute),
		State: capsule.CheckpointState{
			Phase:        capsule.ReviewPhase,
			PhaseName:    capsule.ReviewPhase.String(),
			Progress:     capsule.ReviewPhase.Progress(),
			Cycle:        2,
			Status:       capsule.Halted,
			HaltReason:   capsule.MaxCyclesExceeded(3).String(),
			BudgetUsed:   usage,
			LocksHeld:    []string{"README.md"},
			ArtifactRefs: []string{"artifact:3f0c2a9e/1", "artifact:3f0c2a9e/2"},
			Findings:     findings,
			Reviews: []capsule.ReviewEntry{{
				Cycle: 1, ReviewerID: "stub-reviewer", Verdict: capsule.ChangesRequested,
				Findings: findings, Usage: usage, At: at,
			}},
			Execution: &capsule.ExecutionClaim{Cycle: 2, Holder: "sagad-1", ExpiresAt: at.Add(time.Hour)},
			Result:    &capsule.ExecutionResult{Cycle: 2, ArtifactRef: "artifact:3f0c2a9e/2", Usage: usage, Failed: "exit 1"},
			Attempts:  &capsule.ExecutionAttempts{Cycle: 2, Phase: capsule.ReviewPhase, Failed: 1, LastFailure: capsule.AttemptFailure{ExitCode: 1, Timeout: true, Error: "e", StderrTail: "t"}},
			// Not a state a capsule reaches (a result clears it); here so
			// the schema is checked against every member.
			AwaitingCycle: 2, AwaitingTokenHash: strings.Repeat("cd", 32),
		},
		History: []capsule.Transition{
			{Phase: capsule.Reception, PhaseName: "RECEPTION", Cycle: 0, Outcome: capsule.OutcomePassed, At: at},
			{Phase: capsule.ReviewPhase, PhaseName: "REVIEW", Cycle: 2, Outcome: capsule.OutcomeHalted, Detail: "max_cycles_exceeded:3", At: at},
		},
	}
	bare := full
	bare.WaveID, bare.Digest = "", ""
	bare.History = nil
	bare.State = capsule.CheckpointState{Phase: capsule.Reception, PhaseName: "RECEPTION", Status: capsule.InProgress}

	return map[string]struct {
		name schemas.Name
		v    any
	}{
		"checkpoint full": {schemas.Checkpoint, full},
		"checkpoint nil":  {schemas.Checkpoint, bare},
		"artifact full": {schemas.Artifact, capsule.Artifact{
			SchemaVersion: "1.0", Ref: "artifact:3f0c2a9e/1", CapsuleID: full.CapsuleID,
			ProducerAgentID: "agent-coder-1", Cycle: 1, MediaType: "text/markdown",
			SHA256: strings.Repeat("0f", 32), Size: 42, Usage: usage, CreatedAt: at,
			Content: json.RawMessage(`{"diff":"+status line"}`),
		}},
		"artifact nil": {schemas.Artifact, capsule.Artifact{
			SchemaVersion: "1.0", Ref: "artifact:x", CapsuleID: "c", ProducerAgentID: "p",
			MediaType: "application/octet-stream", SHA256: strings.Repeat("0", 64), CreatedAt: at,
		}},
		"review full": {schemas.Review, capsule.Review{
			SchemaVersion: "1.0", CapsuleID: full.CapsuleID, Cycle: 1, ReviewerAgentID: "stub-reviewer",
			Verdict: capsule.Approved, Findings: findings, Usage: usage, At: at,
		}},
		"review nil": {schemas.Review, capsule.Review{
			SchemaVersion: "1.0", CapsuleID: "c", Cycle: 1, ReviewerAgentID: "r", Verdict: capsule.Rejected, At: at,
		}},
		"continuation full": {schemas.Continuation, capsule.Continuation{
			SchemaVersion: "1.0", CapsuleID: full.CapsuleID, Trigger: capsule.TriggerOperatorManual,
			Reason: "maintenance window", Phase: capsule.Execution, PhaseName: "EXECUTION", Cycle: 1,
			By: "operator", CreatedAt: at,
		}},
		"continuation bare": {schemas.Continuation, capsule.Continuation{
			SchemaVersion: "1.0", CapsuleID: "c", Trigger: capsule.TriggerBudgetWarning,
			Phase: capsule.Reception, PhaseName: "RECEPTION", CreatedAt: at,
		}},
	}
}

func TestRecordsValid(t *testing.T) {
	t.Parallel()
	for label, r := range records() {
		t.Run(label, func(t *testing.T) {
			t.Parallel()
			require.NoError(t, schemas.ValidateValue(r.name, r.v))
		})
	}
}

func TestRecordsInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		record string
		mutate func(m map[string]any)
		want   []string
	}{
		{"checkpoint full", func(m map[string]any) { obj(m, "state")["phase"] = 7 }, []string{"/state/phase"}},
		{"checkpoint full", func(m map[string]any) { obj(m, "state")["status"] = "done" }, []string{"/state/status"}},
		{"checkpoint full", func(m map[string]any) { obj(m, "state")["progress"] = 101 }, []string{"/state/progress"}},
		{"checkpoint full", func(m map[string]any) { m["history"].([]any)[1].(map[string]any)["outcome"] = "exploded" }, []string{"/history/1/outcome"}},
		{"checkpoint full", func(m map[string]any) { m["updated_at"] = "now" }, []string{"/updated_at"}},
		{"checkpoint full", func(m map[string]any) { m["phase"] = 1 }, []string{"/phase"}},
		{"checkpoint full", func(m map[string]any) { delete(obj(m, "state"), "budget_used") }, []string{"/state/budget_used"}},
		{"artifact full", func(m map[string]any) { m["ref"] = "file:README.md" }, []string{"/ref"}},
		{"artifact full", func(m map[string]any) { m["size"] = -1 }, []string{"/size"}},
		{"review full", func(m map[string]any) { m["verdict"] = "MAYBE" }, []string{"/verdict"}},
		{"continuation full", func(m map[string]any) { m["trigger"] = "bored" }, []string{"/trigger"}},
	}
	all := records()
	for _, tt := range tests {
		t.Run(tt.record+" "+strings.Join(tt.want, ","), func(t *testing.T) {
			t.Parallel()
			r := all[tt.record]
			raw, err := json.Marshal(r.v)
			require.NoError(t, err)
			var m map[string]any
			require.NoError(t, json.Unmarshal(raw, &m))
			tt.mutate(m)
			var verr *schemas.ValidationError
			require.ErrorAs(t, schemas.ValidateValue(r.name, m), &verr)
			require.Equal(t, tt.want, verr.Pointers, "details: %v", verr.Details)
		})
	}
}

// TestSchemasMatchGoTypes walks each Go type next to its schema: every json
// field is a schema property and back, and no required property can be
// dropped by omitempty.
func TestSchemasMatchGoTypes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name schemas.Name
		typ  reflect.Type
	}{
		{schemas.Capsule, reflect.TypeFor[capsule.Capsule]()},
		{schemas.Checkpoint, reflect.TypeFor[capsule.Checkpoint]()},
		{schemas.Artifact, reflect.TypeFor[capsule.Artifact]()},
		{schemas.Review, reflect.TypeFor[capsule.Review]()},
		{schemas.Continuation, reflect.TypeFor[capsule.Continuation]()},
	}
	for _, tt := range tests {
		t.Run(string(tt.name), func(t *testing.T) {
			t.Parallel()
			var root map[string]any
			require.NoError(t, json.Unmarshal(schemas.Source(tt.name), &root))
			matchType(t, root, root, tt.typ, "")
		})
	}
}

func matchType(t *testing.T, root, node map[string]any, typ reflect.Type, at string) {
	t.Helper()
	for {
		if ref, ok := node["$ref"].(string); ok {
			node = resolve(t, root, ref)
		}
		switch typ.Kind() {
		case reflect.Pointer:
			typ = typ.Elem()
			continue
		case reflect.Slice:
			items, _ := node["items"].(map[string]any)
			typ, node = typ.Elem(), items
			continue
		}
		break
	}
	if typ.Kind() != reflect.Struct || typ == reflect.TypeFor[time.Time]() {
		return
	}
	require.NotNil(t, node, "%s: no schema for %s", at, typ)
	props, _ := node["properties"].(map[string]any)
	require.Equal(t, false, node["additionalProperties"], "%s: additionalProperties", at)

	var fields []string
	omitempty := map[string]bool{}
	for f := range typ.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		fields = append(fields, name)
		omitempty[name] = slices.Contains(strings.Split(opts, ","), "omitempty")
		sub, _ := props[name].(map[string]any)
		matchType(t, root, sub, f.Type, at+"/"+name)
	}
	require.ElementsMatch(t, fields, slices.Collect(maps.Keys(props)), "%s: properties of %s", at, typ)
	required, _ := node["required"].([]any)
	for _, r := range required {
		require.False(t, omitempty[r.(string)], "%s/%s is required but omitempty", at, r)
	}
}

func resolve(t *testing.T, root map[string]any, ref string) map[string]any {
	t.Helper()
	require.True(t, strings.HasPrefix(ref, "#/$defs/"), "only local refs: %s", ref)
	def, ok := root["$defs"].(map[string]any)[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
	require.True(t, ok, "unresolved %s", ref)
	return def
}

func TestValidateConcurrent(t *testing.T) {
	t.Parallel()
	raw := validCapsule(t)
	bad := bytes.Replace(raw, []byte(`"tokens": 10000`), []byte(`"tokens": "x"`), 1)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			if i%2 == 0 {
				require.NoError(t, schemas.Validate(schemas.Capsule, raw))
			} else {
				require.Error(t, schemas.Validate(schemas.Capsule, bad))
			}
		})
	}
	wg.Wait()
}

func ExampleValidate() {
	raw, err := os.ReadFile("testdata/capsule_valid.json")
	if err != nil {
		panic(err)
	}
	raw = bytes.Replace(raw, []byte(`"tokens": 10000`), []byte(`"tokens": "lots"`), 1)
	raw = bytes.Replace(raw, []byte(`"target": "file:README.md",`), nil, 1)

	var verr *schemas.ValidationError
	if errors.As(schemas.Validate(schemas.Capsule, raw), &verr) {
		fmt.Println(capsule.SchemaInvalid(verr.Pointers))
		for _, d := range verr.Details {
			fmt.Println(d)
		}
	}
	// Output:
	// schema_invalid:/budget/tokens,/target
	// /budget/tokens: expected integer, but got string
	// /target: required property missing
}
