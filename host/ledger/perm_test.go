package ledger

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared/dbfile"
)

// TestFilesPrivate: in a state directory that already existed 0755, under
// umask 022, the ledger and its -wal and -shm files are 0600; a ledger left
// 0644 by an older version is made 0600 when opened.
func TestFilesPrivate(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0o022))
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))

	path := filepath.Join(dir, "ledger.db")
	l, err := Open(ctx, path)
	require.NoError(t, err)
	_, err = l.DeliveryRecord(ctx, RecordParams{Entry: entry("github:a:1", ResultSuccess, t0)})
	require.NoError(t, err)
	require.NoError(t, dbfile.CheckPrivate(path))
	require.NoError(t, l.Close())

	old := filepath.Join(dir, "old.db")
	for _, p := range []string{old, old + "-wal", old + "-shm"} {
		require.NoError(t, os.WriteFile(p, nil, 0o644))
	}
	l, err = Open(ctx, old)
	require.NoError(t, err)
	require.NoError(t, dbfile.CheckPrivate(old))
	require.NoError(t, l.Close())
}
