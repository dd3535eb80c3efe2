//go:build !unix

package executors

import "os/exec"

// ownProcessGroup is a no-op where process groups do not exist: cancellation
// kills the program only.
func ownProcessGroup(*exec.Cmd) {}
