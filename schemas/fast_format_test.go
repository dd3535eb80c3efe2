package schemas

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v5"
	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/differential"
)

// dateTimePair holds fastDateTime to the library's "date-time" format:
// the same answer on the canonical form's edges (every month's last day
// and the one after, leap years by every rule, year 0 and 9999, each field
// at and past its bound, the leap second), on the forms the library reads
// that the fast check leaves to it (offsets, fractions, lower-case 't' and
// 'z'), on strings a byte too short or long and on non-strings; generated,
// strings of the canonical form with fields drawn around their bounds and
// now and then a byte replaced.
var dateTimePair = differential.Pair[string, bool]{
	Name:      "DateTime",
	Fast:      func(s string) (bool, error) { return fastDateTime(jsonschema.Formats["date-time"])(s), nil },
	Reference: func(s string) (bool, error) { return jsonschema.Formats["date-time"](s), nil },
	Seeds: []string{
		"2026-11-29T08:57:53Z", "2024-02-29T00:00:00Z", "2023-02-29T00:00:00Z", "2000-02-29T12:00:00Z",
		"1900-02-29T12:00:00Z", "0000-02-29T00:00:00Z", "0000-01-01T00:00:00Z", "9999-12-31T23:59:59Z",
		"2026-13-01T00:00:00Z", "2026-00-10T00:00:00Z", "2026-04-31T00:00:00Z", "2026-04-30T00:00:00Z",
		"2026-01-00T00:00:00Z", "2026-01-32T00:00:00Z", "2026-01-01T24:00:00Z", "2026-01-01T23:60:00Z",
		"2026-01-01T23:59:60Z", "2026-12-31T23:59:60Z", "2026-01-01T00:00:60Z", "2026-01-01t00:00:00z",
		"2026-01-01T00:00:00+01:00", "2026-01-01T00:00:00.5Z", "2026-01-01T00:00:00Z ", "2026-01-01T00:00:0Z",
		"2026-1-01T00:00:00Z", "2026/01/01T00:00:00Z", "2026-01-01 00:00:00Z", "+026-01-01T00:00:00Z",
		"-026-01-01T00:00:00Z", "2026-01-01T0:00:00Z", "2026-01-01T00:00:00", "", "2026-01-01T00:00:00ZZ",
	},
	Generate: func(r *rand.Rand) string {
		field := func(lo, hi int) int {
			if r.IntN(4) == 0 {
				return lo + r.IntN(hi-lo+1)
			}
			return []int{lo - 1, lo, lo + 1, hi - 1, hi, hi + 1}[r.IntN(6)]
		}
		year := []int{0, 4, 100, 400, 1900, 2000, 2023, 2024, 9999}[r.IntN(9)] + r.IntN(3)
		s := fmt.Sprintf("%04d-%02d-%02dT%02d:%02d:%02dZ", year%10000, field(1, 12), field(1, 31),
			field(0, 23), field(0, 59), field(0, 59))
		if r.IntN(5) == 0 {
			b := []byte(s)
			b[r.IntN(len(b))] = "0123456789-:TtZz+./ \xff"[r.IntN(21)]
			s = string(b)
		}
		return s
	},
	Count:  50000,
	Decode: func(b []byte) (string, bool) { return string(b), true },
	Encode: func(s string) []byte { return []byte(s) },
}

// FuzzDateTime runs dateTimePair on the fuzzer's strings.
func FuzzDateTime(f *testing.F) { differential.Fuzz(f, dateTimePair) }

// TestDateTimeNonStrings: a value that is no string is the library's to
// judge too (it passes: formats apply to strings only).
func TestDateTimeNonStrings(t *testing.T) {
	t.Parallel()
	lib := jsonschema.Formats["date-time"]
	for _, v := range []any{nil, true, 1.5, []any{"2026-01-01T00:00:00Z"}} {
		require.Equal(t, lib(v), fastDateTime(lib)(v), "%#v", v)
	}
}

// TestDateTimeFastPathTaken: the canonical form is judged without the
// library, so the pair compares the fast check and not only the library
// with itself.
func TestDateTimeFastPathTaken(t *testing.T) {
	t.Parallel()
	never := func(any) bool { return false }
	require.True(t, fastDateTime(never)("2026-11-29T08:57:53Z"))
	require.True(t, fastDateTime(never)("2024-02-29T23:59:59Z"))
	require.False(t, fastDateTime(never)("2023-02-29T23:59:59Z"))
}

// TestLenWithinCountsNothingWrong: lenWithin never says "within" for a
// string whose code points (as the library counts them) are not, over
// strings of one- to four-byte code points and invalid bytes and every
// bound from -1 to 12.
func TestLenWithinCountsNothingWrong(t *testing.T) {
	t.Parallel()
	parts := []string{"x", "é", "€", "😀", "\xff", "\xe2\x82"}
	r := rand.New(rand.NewPCG(7, 11))
	for range 20000 {
		var s string
		for range r.IntN(12) {
			s += parts[r.IntN(len(parts))]
		}
		n := utf8.RuneCountInString(s)
		for minLen := -1; minLen <= 12; minLen++ {
			for maxLen := -1; maxLen <= 12; maxLen++ {
				if lenWithin(len(s), minLen, maxLen) {
					require.True(t, n >= minLen && (maxLen < 0 || n <= maxLen), "%q in [%d, %d]", s, minLen, maxLen)
				}
			}
		}
	}
}
