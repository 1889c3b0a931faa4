// Package dbfiletest serves the tests of a package that keeps a SQLite
// file: that the file and its -wal and -shm files are private, and what
// plan SQLite makes for a query.
package dbfiletest

import (
	"context"
	"database/sql"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/shared/dbfile"
)

// FilesPrivate checks that, in a directory that already existed 0755,
// under umask 022, a database open opens and uses (name, in that
// directory) is 0600 with its -wal and -shm files, and that a database
// left 0644 by an older version is made 0600 when opened. open returns
// what closes the database. FilesPrivate sets the umask while it runs.
func FilesPrivate(t *testing.T, name string, open func(path string) (io.Closer, error)) {
	t.Helper()
	defer syscall.Umask(syscall.Umask(0o022))
	dir := filepath.Join(t.TempDir(), "data")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))

	path := filepath.Join(dir, name)
	c, err := open(path)
	require.NoError(t, err)
	require.NoError(t, dbfile.CheckPrivate(path))
	require.NoError(t, c.Close())

	old := filepath.Join(dir, "old.db")
	for _, p := range []string{old, old + "-wal", old + "-shm"} {
		require.NoError(t, os.WriteFile(p, nil, 0o644))
	}
	c, err = open(old)
	require.NoError(t, err)
	require.NoError(t, dbfile.CheckPrivate(old))
	require.NoError(t, c.Close())
}

// QueryPlan is the detail column of SQLite's EXPLAIN QUERY PLAN for query
// on db, one entry a step.
func QueryPlan(t testing.TB, db *sql.DB, query string, args ...any) []string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+query, args...)
	require.NoError(t, err)
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
		plan = append(plan, detail)
	}
	require.NoError(t, rows.Err())
	return plan
}
