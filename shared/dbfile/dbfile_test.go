package dbfile

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMakePrivate: a new file in a directory that already existed 0755,
// under umask 022, is made 0600; files left 0644 by an older version lose
// group and world access.
func TestMakePrivate(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0o022))
	dir := filepath.Join(t.TempDir(), "data")
	require.NoError(t, os.Mkdir(dir, 0o755))

	path := filepath.Join(dir, "new.db")
	require.NoError(t, MakePrivate(path))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	old := filepath.Join(dir, "old.db")
	for _, p := range files(old) {
		require.NoError(t, os.WriteFile(p, nil, 0o644))
	}
	require.Error(t, CheckPrivate(old))
	require.NoError(t, MakePrivate(old))
	require.NoError(t, CheckPrivate(old))
}
