//go:build !unix

package handler

import "os/exec"

// killGroupOnCancel falls back to killing the program alone where process
// groups are not available.
func killGroupOnCancel(*exec.Cmd) {}
