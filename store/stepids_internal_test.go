package store

import (
	"math/rand/v2"
	"regexp"
	"testing"
	"time"

	"github.com/sagad/sagad/internal/differential"
)

// stepIDFormPair holds the hand-written form checks RECEPTION's look-up
// decides on to the regular expressions of RFC 9562's lowercase forms:
// version 8 (the step ids compose draws now) and version 4 (an older
// sagad's, and every producer's).
var stepIDFormPair = differential.Pair[string, [2]bool]{
	Name: "StepIDForm",
	Fast: func(id string) ([2]bool, error) { return [2]bool{StepIDForm(id), legacyStepIDForm(id)}, nil },
	Reference: func(id string) ([2]bool, error) {
		return [2]bool{uuidV8.MatchString(id), uuidV4.MatchString(id)}, nil
	},
	Seeds: []string{
		"", "step", "5a6a0000-0000-8000-8000-000000000000", "5a6a0000-0000-4000-8000-000000000000",
		"5a6a0000-0000-8000-c000-000000000000", "5A6A0000-0000-8000-8000-000000000000",
		"5a6a0000-0000-8000-8000-00000000000", "5a6a0000-0000-8000-8000-0000000000000",
		"5a6a0000_0000-8000-8000-000000000000", "5a6a0000-0000-1000-b000-000000000000",
		"01ARZ3NDEKTSV4RRFFQ69G5FAV", "5a6a0000-0000-8000-8000-00000000000g",
	},
	Generate: func(r *rand.Rand) string {
		const hex = "0123456789abcdefABG-"
		b := []byte("5a6a0000-0000-8000-8000-000000000000")
		for range 1 + r.IntN(4) {
			b[r.IntN(len(b))] = hex[r.IntN(len(hex))]
		}
		return string(b[:len(b)-r.IntN(2)])
	},
	Decode: func(b []byte) (string, bool) { return string(b), true },
	Encode: func(s string) []byte { return []byte(s) },
}

var (
	uuidV8 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
)

// FuzzStepIDForm: the form checks agree with the expressions on any bytes
// (stepIDFormPair).
func FuzzStepIDForm(f *testing.F) { differential.Fuzz(f, stepIDFormPair) }

// TestLegacyDeadline: until when version 4 ids are looked up.
func TestLegacyDeadline(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		found bool
		ttl   time.Duration
		want  int64
	}{
		{false, time.Hour, 0},
		{false, 0, 0},
		{true, 0, legacyForever},
		{true, -time.Hour, legacyForever},
		{true, time.Hour, at.Add(time.Hour + time.Minute).UnixNano()},
	} {
		if got := legacyDeadline(tc.found, at, tc.ttl); got != tc.want {
			t.Errorf("legacyDeadline(%v, %v) = %d, want %d", tc.found, tc.ttl, got, tc.want)
		}
	}
}
