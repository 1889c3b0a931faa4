package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The durability settings are the point of this engine: check they hold on
// both pools.
func TestPragmas(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "nested", "cloud.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })

	pragma := func(db interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}, name string) string {
		var v string
		require.NoError(t, db.QueryRowContext(ctx, "PRAGMA "+name).Scan(&v))
		return v
	}
	require.Equal(t, "wal", pragma(s.write, "journal_mode"))
	require.Equal(t, "2", pragma(s.write, "synchronous"), "FULL")
	require.Equal(t, "1", pragma(s.write, "foreign_keys"))
	require.Equal(t, "10000", pragma(s.write, "busy_timeout"))
	require.Equal(t, "1", pragma(s.read, "foreign_keys"))
	require.Equal(t, "1", pragma(s.read, "query_only"))
	require.Equal(t, 1, s.write.Stats().MaxOpenConnections, "one writer")

	_, err = s.read.ExecContext(ctx, "CREATE TABLE x (y INTEGER)")
	require.Error(t, err, "the read pool cannot write")
}
