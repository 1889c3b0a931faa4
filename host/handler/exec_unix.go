//go:build unix

package handler

import (
	"os/exec"
	"syscall"
)

// killGroupOnCancel starts the program in its own process group and makes
// cancellation kill the whole group, grandchildren included.
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
