//go:build !linux

package executors

// pinThread is needed only for Linux's parent-death signal.
func pinThread() (unpin func()) { return func() {} }
