package admin

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/sagad/sagad/capsule"
)

// FuzzEventsCursor: a cursor from a client is parsed without panicking;
// one that parses prints back as the cursor of the same position.
func FuzzEventsCursor(f *testing.F) {
	for _, s := range []string{"0:0:0", "12:9:1795638030590075889", "1:2", "a:b:c", "::", "18446744073709551615:1:-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseEventsCursor(s)
		if err != nil {
			return
		}
		back, err := parseEventsCursor(c.String())
		if err != nil || back.events != c.events || back.checkpoints != c.checkpoints || !back.since.Equal(c.since) {
			t.Fatalf("cursor %q printed as %q reads back as %+v", s, c.String(), back)
		}
	})
}

// FuzzRevisionEvents: a checkpoint revision's bytes, whatever they are
// (sagad reads them off its bucket), yield events without panicking, none
// stamped before from.
func FuzzRevisionEvents(f *testing.F) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	cp := capsule.Checkpoint{CapsuleID: "c1", Key: "c1", History: []capsule.Transition{{Phase: 0, PhaseName: "RECEPTION", Outcome: "passed", At: now}}}
	b, _ := json.Marshal(cp)
	for _, s := range [][]byte{b, nil, []byte(`{}`), []byte(`{"history":[{"phase":9,"outcome":"x"}]}`), []byte(`[`)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, ev := range revisionEvents(data, now) {
			if ev.At.Before(now) {
				t.Fatalf("event %+v before from", ev)
			}
		}
	})
}
