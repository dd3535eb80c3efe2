package store

import (
	"errors"
	"testing"
)

// FuzzDecodeMembership: any bytes in the compositions bucket (sagad wrote
// them, but a record is still bytes from NATS) decode to aligned steps and
// digests, or to ErrUndecodable; never a panic.
func FuzzDecodeMembership(f *testing.F) {
	for _, seed := range []string{
		`{"chain_id":"c","producer":"p","steps":["a","b"],"step_digests":["x","y"],"held":[1]}`,
		`{"steps":["a"],"step_digests":[]}`,
		`{"steps":null}`,
		`{"held":[-1,99]}`,
		`[]`, `null`, ``, `{`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMembership(b)
		if err != nil {
			if !errors.Is(err, ErrUndecodable) {
				t.Fatalf("error %v is not ErrUndecodable", err)
			}
			return
		}
		if len(m.Steps) != len(m.StepDigests) {
			t.Fatalf("%d steps, %d digests", len(m.Steps), len(m.StepDigests))
		}
	})
}
