//go:build unix

package executors

import (
	"errors"
	"os/exec"
	"syscall"
)

// ownProcessGroup starts the program as the leader of a new process group
// and makes cancellation kill the whole group, so that nothing it spawned
// outlives a timeout or a cancelled context. On Linux the program is also
// killed when sagad dies (see dieWithParent).
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(cmd.SysProcAttr)
	cmd.Cancel = func() error {
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return err
	}
}
