//go:build linux

package handler

import "syscall"

// setParentDeathSignal asks Linux to kill the program when the host dies
// without a chance to cancel it (SIGKILL, a crash), so that a handler is not
// left running unobserved while the cloud hands its webhook out again. It
// reaches the program itself, not its own children. (Linux ties it to the
// thread that started the program; Go ends a thread only when a goroutine
// locked to it exits, which the host never does.)
func setParentDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}
