//go:build !unix

package handler

import "os/exec"

// ownProcessGroup falls back to killing the program alone where process
// groups are not available.
func ownProcessGroup(*exec.Cmd) {}
