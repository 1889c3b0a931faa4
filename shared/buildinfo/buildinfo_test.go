package buildinfo

import (
	"os"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVersionFromFile: without a linked version, the version is the
// VERSION file's, one release-shaped line.
func TestVersionFromFile(t *testing.T) {
	b, err := os.ReadFile("VERSION")
	require.NoError(t, err)
	require.Equal(t, strings.TrimSpace(string(b)), Version())
	require.Regexp(t, regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$`), Version())
	require.Equal(t, 1, strings.Count(string(b), "\n"), "one line")
}

func TestLinkedWins(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)
	version, commit = "1.4.0", "3f2a"
	require.Equal(t, "1.4.0", Version())
	require.Equal(t, "3f2a", Commit())
	require.True(t, strings.HasPrefix(String("cloud", "protocol 0.2.0"), "cloud 1.4.0 (commit 3f2a, go"))
	require.True(t, strings.HasSuffix(String("cloud", "protocol 0.2.0"), ", protocol 0.2.0)"))
}

func TestVCSCommit(t *testing.T) {
	require.Equal(t, "unknown", vcsCommit(nil))
	require.Equal(t, "abc", vcsCommit([]debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}))
	require.Equal(t, "abc-dirty", vcsCommit([]debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}}))
}
