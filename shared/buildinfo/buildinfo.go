// Package buildinfo says which build a binary is: the version and commit
// set at link time (make release: -ldflags "-X main.version=… -X
// main.commit=…"), else the commit the Go toolchain recorded.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Commit is linked when set, else the VCS revision Go stamped into the
// binary (with "-dirty" when the tree had changes), else "unknown".
func Commit(linked string) string {
	if linked != "" {
		return linked
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "unknown"
	}
	if modified == "true" {
		rev += "-dirty"
	}
	return rev
}

// String is what `NAME version` prints: the name, version, commit, Go
// version and platform on one line.
func String(name, version, commit string) string {
	return fmt.Sprintf("%s %s (commit %s, %s, %s/%s)", name, version, Commit(commit), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
