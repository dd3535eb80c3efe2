package capsule

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNameTable: every capsule member name is found as the table's own
// copy (so the hash found a multiplier without collisions), and names one
// byte away, shorter or longer, are not.
func TestNameTable(t *testing.T) {
	t.Parallel()
	names := capsuleNames()
	require.Greater(t, len(names), 40)
	for _, n := range names {
		got, ok := memberNames.find([]byte(n))
		require.True(t, ok, n)
		require.Equal(t, n, got)
		for i := range len(n) {
			b := []byte(n)
			b[i] ^= 0x20
			if other, ok := memberNames.find(b); ok {
				require.Equal(t, string(b), other)
			}
			_, ok := memberNames.find([]byte(n[:i]))
			require.Equal(t, i > 0 && contains(names, n[:i]), ok, n[:i])
		}
		_, ok = memberNames.find([]byte(n + "x"))
		require.False(t, ok)
	}
	_, ok := memberNames.find(nil)
	require.False(t, ok)
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}
