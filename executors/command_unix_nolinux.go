//go:build unix && !linux

package executors

import "syscall"

// dieWithParent does nothing outside Linux, which alone has a parent-death
// signal for exec'd programs: there a program outlives a sagad killed by
// SIGKILL (a graceful stop still kills its process group).
func dieWithParent(*syscall.SysProcAttr) {}
