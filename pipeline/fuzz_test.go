package pipeline_test

import (
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sagad/sagad/metrics"
	"github.com/sagad/sagad/pipeline"
	"github.com/sagad/sagad/store"
)

// FuzzDecodePhaseHeaders: whatever headers a phase message carries, the
// decoder either names a capsule by a valid key and a canonical cycle number,
// or refuses with one of the closed set of termination causes.
func FuzzDecodePhaseHeaders(f *testing.F) {
	f.Add("0f8fad5b-d9cb-469f-a165-70867728950e", "1")
	f.Add("x-12", "0")
	f.Add("", "1")
	f.Add("*", "1")
	f.Add("../x", "1")
	f.Add("k", "01")
	f.Add("k", "+1")
	f.Add("k", "-1")
	f.Add("k", "99999999999999999999")
	f.Fuzz(func(t *testing.T, key, cycle string) {
		h := nats.Header{}
		if key != "" {
			h.Set(store.HeaderKey, key)
		}
		h.Set(store.HeaderCycle, cycle)
		k, c, cause, err := pipeline.DecodePhaseHeaders(h)
		if err != nil {
			known := false
			for _, r := range metrics.TermReasons {
				known = known || r == cause
			}
			if !known {
				t.Fatalf("cause %q is not a termination reason", cause)
			}
			return
		}
		if cause != "" || !store.ValidKey(k) || k != key {
			t.Fatalf("accepted key %q (from %q) with cause %q", k, key, cause)
		}
		if strconv.Itoa(c) != cycle || c < 0 {
			t.Fatalf("accepted cycle %d from %q", c, cycle)
		}
	})
}
