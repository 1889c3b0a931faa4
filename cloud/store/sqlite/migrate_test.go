package sqlite_test

import (
	"context"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
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
	// Versions are the files' numbers, which may skip one (a migration of
	// another branch not merged yet).
	last, err := strconv.ParseInt(strings.SplitN(files[len(files)-1], "_", 2)[0], 10, 64)
	require.NoError(t, err)

	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cloud.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	res, err := s.MigrateReport(ctx)
	require.NoError(t, err)
	require.Equal(t, store.MigrateResult{Applied: len(files), Version: last}, res)
	res, err = s.MigrateReport(ctx)
	require.NoError(t, err)
	require.Equal(t, store.MigrateResult{Applied: 0, Version: last}, res)
}
