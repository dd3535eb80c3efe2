// Package loopback finds free loopback ports for the servers that tests, the
// benchmark and the chaos suite start on this machine.
package loopback

import (
	"fmt"
	"net"
)

// FreePorts returns n distinct loopback ports that were free a moment ago
// (all held at once while they are picked, so none is returned twice).
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free loopback port: %w", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}
