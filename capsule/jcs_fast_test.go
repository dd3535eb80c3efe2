package capsule

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPlainIntegerIsFormatNumber holds the digest's shortcut for integers
// (written as they are) to the general path (read as a double, written as
// ECMAScript writes it) over 20,000 random integer literals of 1 to 17
// digits, signed or not, and the edges; it also checks that the shortcut
// takes no literal the general path would write otherwise.
func TestPlainIntegerIsFormatNumber(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 5))
	lits := []string{"0", "-0", "1", "9", "10", "01", "-1", "1.0", "1e2", "1E2", "100000000000000",
		"999999999999999", "1000000000000000", "9007199254740993", "123456789012345", "", "-", "1.", "0.5"}
	for range 20_000 {
		var b strings.Builder
		if r.IntN(4) == 0 {
			b.WriteByte('-')
		}
		for i, n := 0, 1+r.IntN(17); i < n; i++ {
			b.WriteByte(byte('0' + r.IntN(10)))
		}
		lits = append(lits, b.String())
	}
	taken := 0
	for _, lit := range lits {
		if !plainInteger(json.Number(lit)) {
			continue
		}
		taken++
		f, err := strconv.ParseFloat(lit, 64)
		require.NoError(t, err, lit)
		require.Equal(t, formatNumber(f), lit)
	}
	require.Greater(t, taken, 5_000)
	for _, lit := range []string{"-0", "01", "-1", "1.0", "1e2", "1000000000000000", ""} {
		require.False(t, plainInteger(json.Number(lit)), lit)
	}
}
