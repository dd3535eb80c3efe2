package phases_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/capsule"
	"github.com/sagad/sagad/phases"
	"github.com/sagad/sagad/rules"
	"github.com/sagad/sagad/schemas"
)

// receptionLocks: every lock is available but "locked.txt", and asking
// never fails, so any Retry would be RECEPTION's own doing.
type receptionLocks struct{ phases.Locks }

func (receptionLocks) Available(_ context.Context, path, _ string) (bool, error) {
	return path != "locked.txt", nil
}

// FuzzReceive: RECEPTION, bytes in, decision out, never panics and never
// asks for a redelivery of bytes (a retry of input that will not change is a
// poison message); it halts with a known code whose text parses back, or
// advances a capsule that re-validates: schema, integrity, deadline, budget.
// The capsule it reads is json.Unmarshal's (canonical ids), its digest
// Digest's.
// Seeds: the example capsules, a sealed test capsule and
// testdata/fuzz/FuzzReceive.
func FuzzReceive(f *testing.F) {
	files, err := filepath.Glob("../examples/capsules/*.*")
	require.NoError(f, err)
	for _, name := range files {
		b, err := os.ReadFile(name)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add(newDoc().Sealed(f))
	f.Add(newDoc().Set("constraints.resource_locks_required", []any{"locked.txt"}).Sealed(f))
	f.Add(newDoc().Set("capsule_id", 7).Sealed(f))
	// A verification loop's round 2 step, carrying the verifier's findings.
	f.Add(newDoc().Set("chain", map[string]any{"id": "c", "step": 0, "round": 2,
		"findings": []any{map[string]any{"rule": 3, "field": "target", "message": "fix it", "source": "verifier"}}}).Sealed(f))
	f.Add(newDoc().Set("chain", map[string]any{"id": "c", "step": 0, "round": 1, "findings": []any{map[string]any{}}}).Sealed(f))
	f.Add([]byte(`{"schema_version":"1.0","capsule_id":"a","capsule_id":"b"}`))
	f.Add([]byte(`{"schema_version":"9.0"}`))
	f.Add([]byte(" {\"schema_version\":\"1.0\",\"x\":\"\\ud800\"}"))

	env := &phases.Env{
		Locks: receptionLocks{}, Rules: rules.Config{}.WithDefaults(), MaxIntakeBytes: 64 << 10,
		Now: func() time.Time { return now }, RetryDelay: time.Second,
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		r := phases.Receive(context.Background(), env, raw, func(id string) string { return id })
		d := r.Decision
		switch d.Action {
		case phases.Halt:
			require.True(t, slices.Contains(capsule.HaltCodes, d.Halt.Code), "halt code %q", d.Halt.Code)
			require.Equal(t, d.Halt, capsule.ParseHaltReason(d.Halt.String()))
			if len(raw) > env.MaxIntakeBytes {
				require.Equal(t, capsule.CodeCapsuleTooLarge, d.Halt.Code)
			}
		case phases.Advance:
			c := r.Capsule
			require.NotNil(t, c)
			require.LessOrEqual(t, len(raw), env.MaxIntakeBytes)
			require.NoError(t, schemas.Validate(schemas.Capsule, raw))
			require.NoError(t, capsule.VerifyIntegrity(raw))
			require.Equal(t, c.Integrity.SHA256, r.Digest)
			require.Equal(t, c.CapsuleID, r.ClaimedID)
			require.True(t, c.Deadline.After(now), "deadline %v", c.Deadline)
			require.Positive(t, c.Budget.Tokens)
			require.NotContains(t, c.Constraints.ResourceLocksRequired, "locked.txt")
		default:
			t.Fatalf("action %v (%v) for %q", d.Action, d.Err, raw)
		}
		if r.Capsule != nil {
			require.Equal(t, r.Capsule.CapsuleID, r.ClaimedID)
			// The capsule is what encoding/json makes of the bytes, however
			// RECEPTION read it (the parsed tree or encoding/json).
			want := new(capsule.Capsule)
			require.NoError(t, json.Unmarshal(raw, want))
			want.Canonicalize()
			require.True(t, reflect.DeepEqual(want, r.Capsule), "%s", raw)
		}
		if r.Digest != "" {
			// The digest is Digest's, from the text or the tree.
			want, err := capsule.Digest(raw)
			require.NoError(t, err)
			require.Equal(t, want, r.Digest)
		}
	})
}
