package store

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// FuzzScanEntry: whatever subject and headers an entry of the checkpoints
// bucket carries, scanEntry names a key sagad could have written, the one
// the subject ends with, or none; and an entry is a put exactly when it
// carries neither a KV operation nor a marker reason.
func FuzzScanEntry(f *testing.F) {
	f.Add("$KV.SAGA_CHECKPOINTS.0b9f2c6e-4c1a-4e0a-9a51-1f0c2d3e4f50", "", "")
	f.Add("$KV.SAGA_CHECKPOINTS.k", "DEL", "")
	f.Add("$KV.SAGA_CHECKPOINTS.k", "PURGE", "")
	f.Add("$KV.SAGA_CHECKPOINTS.k", "", "MaxAge")
	f.Add("$KV.SAGA_CHECKPOINTS.a.b", "", "")
	f.Add("$KV.SAGA_CHECKPOINTS.", "", "")
	f.Add("$KV.OTHER.k", "", "")
	f.Fuzz(func(t *testing.T, subject, op, marker string) {
		h := nats.Header{}
		if op != "" {
			h.Set(kvOperation, op)
		}
		if marker != "" {
			h.Set(jetstream.MarkerReasonHeader, marker)
		}
		key, put, ok := scanEntry(subject, h)
		if !ok {
			if key != "" || put {
				t.Fatalf("no entry, yet key %q put %v", key, put)
			}
			return
		}
		if !ValidKey(key) || checkpointSubjects+key != subject {
			t.Fatalf("key %q of subject %q", key, subject)
		}
		if want := h.Get(kvOperation) == "" && h.Get(jetstream.MarkerReasonHeader) == ""; put != want {
			t.Fatalf("put %v, want %v (op %q, marker %q)", put, want, op, marker)
		}
	})
}
