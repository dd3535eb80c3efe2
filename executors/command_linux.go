//go:build linux

package executors

import (
	"runtime"
	"syscall"
)

// dieWithParent asks the kernel to SIGKILL the program when sagad dies, even
// by SIGKILL or a crash, when no cancellation can run: an executor must not
// outlive the daemon that would record its result. The signal reaches the
// program itself; what it spawned is in its process group, which only a
// living sagad can kill (a program that forks helpers should set the same
// flag on them, or exec them in its place).
func dieWithParent(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }

// pinThread keeps the calling goroutine on its OS thread until the returned
// function is called. Linux sends the parent-death signal when the thread
// that forked the child exits, not the process; pinned from Start to Wait,
// that thread cannot be ended under the child by some other goroutine that
// locks it and exits.
func pinThread() (unpin func()) {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}
