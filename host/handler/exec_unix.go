//go:build unix

package handler

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup starts the program in its own process group and makes
// cancellation kill the whole group, grandchildren included.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(cmd.SysProcAttr)
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
