package capsule

import (
	"os"
	"testing"
	"time"
)

// typicalCheckpoint is a valid capsule's checkpoint as sagad writes it in
// REVIEW: the members RECEPTION sets, a claim, a result and five
// transitions, every time in UTC.
func typicalCheckpoint() *Checkpoint {
	at := time.Date(2026, 11, 29, 9, 5, 7, 123456789, time.UTC)
	id := "0af76519-16cd-43dd-8448-eb211c80319c"
	cp := &Checkpoint{
		SchemaVersion: CheckpointSchemaVersion, CapsuleID: id, Key: id,
		TraceID:      "0af7651916cd43dd8448eb211c80319c",
		TraceParent:  "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		Producer:     "bench",
		Digest:       "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		Constitution: "2026.11.3+0123abcd", IntakeSeq: 123456,
		CreatedAt: at, UpdatedAt: at.Add(40 * time.Millisecond),
		State: CheckpointState{
			Phase: ReviewPhase, PhaseName: ReviewPhase.String(), Progress: 71, Cycle: 1, Status: InProgress,
			BudgetUsed: Usage{Tokens: 1200, Dollars: 0.012}, LocksHeld: []string{}, ArtifactRefs: []string{"artifact:" + id + "/1"},
			Execution: &ExecutionClaim{Cycle: 1, Holder: "sagad-1/42", ExpiresAt: at.Add(time.Minute)},
			Result:    &ExecutionResult{Cycle: 1, ArtifactRef: "artifact:" + id + "/1", Usage: Usage{Tokens: 1200, Dollars: 0.012}},
		},
	}
	for i, ph := range []Phase{Reception, Planning, AutomatedGates, RealityAnchor, Execution} {
		cp.History = append(cp.History, Transition{Phase: ph, PhaseName: ph.String(), Cycle: min(i/4, 1), Outcome: OutcomePassed, At: at.Add(time.Duration(i) * 7 * time.Millisecond)})
	}
	return cp
}

// BenchmarkCheckpointTypical measures one write's encoding of a typical
// checkpoint into a buffer the writer keeps, as store.encode does.
func BenchmarkCheckpointTypical(b *testing.B) {
	cp := typicalCheckpoint()
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = cp.AppendJSON(buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTraceIDOf measures the traceparent check every encode and
// decode makes.
func BenchmarkTraceIDOf(b *testing.B) {
	tp := typicalCheckpoint().TraceParent
	n := 0
	for b.Loop() {
		id, _ := traceIDOf(tp)
		n += len(id)
	}
}

// BenchmarkParseDocument measures RECEPTION's parse of a capsule.
func BenchmarkParseDocument(b *testing.B) {
	raw, err := os.ReadFile("../examples/capsules/valid.json")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseDocument(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReceptionRead measures what RECEPTION does with a capsule's
// bytes in this package: parse, fill the Capsule, digest. The capsule is
// in canonical form, as sagabench's producers send it.
func BenchmarkReceptionRead(b *testing.B) {
	pretty, err := os.ReadFile("../examples/capsules/valid.json")
	if err != nil {
		b.Fatal(err)
	}
	raw, err := Canonicalize(pretty)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		doc, err := ParseDocument(raw)
		if err != nil {
			b.Fatal(err)
		}
		if _, ok := doc.Capsule(); !ok {
			b.Fatal("not filled")
		}
		if _, err := doc.Digest(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendUsage measures a usage's encoding, its dollars those of
// the stub executor's two calls.
func BenchmarkAppendUsage(b *testing.B) {
	u := Usage{Tokens: 2000, Dollars: 0.02}
	buf := make([]byte, 0, 64)
	for b.Loop() {
		buf, _ = appendUsage(buf[:0], u)
	}
}
