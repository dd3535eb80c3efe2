package loopback_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagad/sagad/internal/loopback"
)

func TestFreePortsAreDistinctAndFree(t *testing.T) {
	ports, err := loopback.FreePorts(8)
	require.NoError(t, err)
	seen := map[int]bool{}
	for _, p := range ports {
		require.False(t, seen[p], "port %d twice", p)
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		require.NoError(t, err, "port %d is free", p)
		require.NoError(t, l.Close())
	}
}
