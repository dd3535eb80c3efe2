// Package capsuletest builds capsules for tests: a valid, sealed capsule that
// completes with the stub executor and reviewer, changed field by field
// through its JSON form so tests can also build invalid ones.
package capsuletest

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sagad/sagad/capsule"
)

// Doc is a capsule in its generic JSON form.
type Doc map[string]any

// New returns a valid capsule document with a fresh UUID-shaped id, created
// now and due in an hour. Its refs point at "go.mod" and "README.md" under
// the workspace, which [Workspace] creates.
func New() Doc {
	now := time.Now().UTC().Truncate(time.Second)
	return Doc{
		"schema_version":    "1.0",
		"capsule_id":        NewID(),
		"created_at":        now.Format(time.RFC3339),
		"deadline":          now.Add(time.Hour).Format(time.RFC3339),
		"producer_agent_id": "agent-coder-1",
		"task":              map[string]any{"kind": "stub", "title": "Touch the README", "description": "Append a line."},
		"spec": map[string]any{
			"approved": true, "approved_by": "human-lead", "approved_at": now.Add(-time.Minute).Format(time.RFC3339),
			"acceptance_criteria": []any{"README.md ends with the new line"},
			"problem_statement":   "The README lacks a status line.",
			"definition_of_done":  "The reviewer approves.",
		},
		"context_refs": []any{"file:go.mod"},
		"target":       "file:README.md",
		"constraints": map[string]any{
			"resource_locks_required": []any{"README.md"},
			"allowed_paths":           []any{"."},
			"network":                 map[string]any{"mode": "none"},
			"destructive":             false,
		},
		"budget": map[string]any{"tokens": 10000, "dollars": 5},
		"review": map[string]any{"reviewer_agent_id": "stub-reviewer", "max_cycles": 3},
	}
}

// NewID returns a random version 4 UUID.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// ID returns the document's capsule_id.
func (d Doc) ID() string { s, _ := d["capsule_id"].(string); return s }

// Set sets a dotted path ("budget.tokens") to v, creating objects on the way.
func (d Doc) Set(path string, v any) Doc {
	parts := strings.Split(path, ".")
	m := map[string]any(d)
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = v
	return d
}

// Delete removes a dotted path.
func (d Doc) Delete(path string) Doc {
	parts := strings.Split(path, ".")
	m := map[string]any(d)
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			return d
		}
		m = next
	}
	delete(m, parts[len(parts)-1])
	return d
}

// Stub sets metadata.stub.
func (d Doc) Stub(script map[string]any) Doc {
	return d.Set("metadata", map[string]any{"stub": script})
}

// Unsealed returns the JSON bytes as they are.
func (d Doc) Unsealed(t testing.TB) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any(d))
	if err != nil {
		t.Fatalf("capsuletest: marshal: %v", err)
	}
	return b
}

// Sealed returns the JSON bytes with integrity.sha256 filled in.
func (d Doc) Sealed(t testing.TB) []byte {
	t.Helper()
	b, err := capsule.Seal(d.Unsealed(t))
	if err != nil {
		t.Fatalf("capsuletest: seal: %v", err)
	}
	return b
}

// Workspace creates a temporary workspace holding go.mod and README.md.
func Workspace(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"go.mod", "README.md"} {
		if err := writeFile(dir, f); err != nil {
			t.Fatalf("capsuletest: workspace: %v", err)
		}
	}
	return dir
}
