package scripts

import (
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// versionLine is what `cloud version` and `host version` print: the name,
// the version, then the commit.
var versionLine = regexp.MustCompile(`^(cloud|host) (\S+) \(commit (\S+), `)

// versionOf runs BIN version and returns its version and commit.
func versionOf(t *testing.T, bin string) (version, commit string) {
	t.Helper()
	out, err := exec.Command(bin, "version").CombinedOutput()
	require.NoError(t, err, "%s version: %s", bin, out)
	m := versionLine.FindStringSubmatch(string(out))
	require.NotNil(t, m, "%s version: %s", bin, out)
	require.Equal(t, filepath.Base(bin), m[1])
	return m[2], m[3]
}

// withoutVersionSettings is this environment without VERSION and COMMIT,
// which release.sh would take over its defaults.
func withoutVersionSettings() []string {
	var env []string
	for _, kv := range environ() {
		if !strings.HasPrefix(kv, "VERSION=") && !strings.HasPrefix(kv, "COMMIT=") && !strings.HasPrefix(kv, "BIN=") {
			env = append(env, kv)
		}
	}
	return env
}

// TestOneVersion: cloud and host built by make build, by make release
// and by a plain go build carry one version, the one in
// shared/buildinfo/VERSION; make build's and make release's the same
// commit, the checkout's, which a plain build shows too where Go stamps it.
// make build's and make release's are built one way (scripts/release.sh):
// static executables (no dynamic loader to start, where the build is for
// Linux), without gin's MessagePack binding.
func TestOneVersion(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "shared", "buildinfo", "VERSION"))
	require.NoError(t, err)
	want := strings.TrimSpace(string(b))
	out, err := exec.Command(filepath.Join(root, "scripts", "commit.sh")).Output()
	require.NoError(t, err)
	checkout := strings.TrimSpace(string(out))
	require.Regexp(t, `^[0-9a-f]{40}(-dirty)?$`, checkout, "scripts/commit.sh in a checkout")

	// build runs the command args gives for a directory of its own.
	build := func(args func(dir string) []string) string {
		t.Helper()
		dir := t.TempDir()
		a := args(dir)
		cmd := exec.Command(a[0], a[1:]...)
		cmd.Dir = root
		cmd.Env = withoutVersionSettings()
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s: %s", a, out)
		return dir
	}
	made := build(func(dir string) []string { return []string{"make", "--no-print-directory", "build", "BIN=" + dir} })
	plain := build(func(dir string) []string { return []string{"go", "build", "-o", dir + "/", "./cloud", "./host"} })
	released := build(func(dir string) []string { return []string{"scripts/release.sh", "--flat", "--out", dir} })

	for _, dir := range []string{made, plain, released} {
		for _, name := range []string{"cloud", "host"} {
			v, commit := versionOf(t, filepath.Join(dir, name))
			require.Equal(t, want, v, "%s %s", dir, name)
			if dir == plain && commit == "unknown" {
				continue // built with -buildvcs=false, as GOFLAGS may say
			}
			require.Equal(t, checkout, commit, "%s %s", dir, name)
		}
	}
	for _, dir := range []string{made, released} {
		for _, name := range []string{"cloud", "host"} {
			requireStatic(t, filepath.Join(dir, name))
			info, err := buildinfo.ReadFile(filepath.Join(dir, name))
			require.NoError(t, err)
			require.Contains(t, info.Settings, debug.BuildSetting{Key: "-tags", Value: "nomsgpack"}, "%s %s: without gin's MessagePack binding", dir, name)
		}
	}
}

// requireStatic fails unless bin, an ELF executable, names no dynamic
// loader (a PT_INTERP program header) and so needs no C library to start;
// on a system of another format it checks nothing.
func requireStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		var format *elf.FormatError
		if errors.As(err, &format) {
			return // not ELF: a Mach-O binary, built on macOS
		}
		require.NoError(t, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "%s is linked dynamically", bin)
	}
}
