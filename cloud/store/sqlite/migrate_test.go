package sqlite_test

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/sqlite"
	"github.com/relaykit/relay/migrations"
)

// TestMigrateReport: a new database gets every migration, and says so; run
// again, nothing.
func TestMigrateReport(t *testing.T) {
	ctx := context.Background()
	files, err := fs.Glob(migrations.SQLite, "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	// Numbers may skip (a number kept for another change): the version is the last file's.
	var latest int64
	_, err = fmt.Sscanf(files[len(files)-1], "%05d_", &latest)
	require.NoError(t, err)

	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cloud.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	res, err := s.MigrateReport(ctx)
	require.NoError(t, err)
	require.Equal(t, store.MigrateResult{Applied: len(files), Version: latest}, res)
	res, err = s.MigrateReport(ctx)
	require.NoError(t, err)
	require.Equal(t, store.MigrateResult{Applied: 0, Version: latest}, res)
}
