// Package buildinfo says which build a binary is. Both binaries, cloud and
// host, read their version here, so that one build has one version:
//
//   - the version is the VERSION file beside this package, embedded, unless
//     the link set another (make release VERSION=1.4.0: -ldflags "-X
//     github.com/relaykit/relay/shared/buildinfo.version=1.4.0");
//   - the commit is the one the link set (COMMIT, where the build has no
//     checkout, as in an image), else the VCS revision the Go toolchain
//     stamped when it built in a checkout.
//
// make build, make release and a plain go build therefore agree.
package buildinfo

import (
	_ "embed"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

//go:embed VERSION
var versionFile string

// version and commit are set at link time, when at all.
var version, commit string

// Version is the relay's version: the one linked, else VERSION's.
func Version() string {
	if version != "" {
		return version
	}
	return strings.TrimSpace(versionFile)
}

// Commit is the commit the binary was built from: the one linked, else the
// VCS revision Go stamped into the binary (with "-dirty" when the tree had
// changes), else "unknown".
func Commit() string {
	if commit != "" {
		return commit
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return vcsCommit(bi.Settings)
}

func vcsCommit(settings []debug.BuildSetting) string {
	var rev, modified string
	for _, s := range settings {
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
// version and platform on one line, and extra facts, if any, after them.
func String(name string, extra ...string) string {
	facts := append([]string{"commit " + Commit(), runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH}, extra...)
	return fmt.Sprintf("%s %s (%s)", name, Version(), strings.Join(facts, ", "))
}
