package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store/sqlite"
	"github.com/relaykit/relay/shared/dbfile"
)

// TestFilesPrivate: in a directory that already existed 0755, under umask
// 022, the database and its -wal and -shm files are 0600; a database left
// 0644 by an older version is made 0600 when opened.
func TestFilesPrivate(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0o022))
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))

	path := filepath.Join(dir, "cloud.db")
	s, err := sqlite.Open(ctx, path)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, dbfile.CheckPrivate(path))
	require.NoError(t, s.Close())

	old := filepath.Join(dir, "old.db")
	for _, p := range []string{old, old + "-wal", old + "-shm"} {
		require.NoError(t, os.WriteFile(p, nil, 0o644))
	}
	s, err = sqlite.Open(ctx, old)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, dbfile.CheckPrivate(old))
	require.NoError(t, s.Close())
}
