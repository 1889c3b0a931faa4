package rig

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A server stopped with StopKeep leaves its directory, and pgtest.sh start
// on it starts the same data again (the bench's -keep): nothing is
// initialized afresh.
func TestStopKeepStartsTheSameDataAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root, err := RepoRoot()
	require.NoError(t, err)
	pg, err := StartPostgres(ctx, root, "", false)
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = pg.Stop()
		}
	})
	exec := func(url, sql string) {
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		require.NoError(t, err)
	}
	exec(pg.URL, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('still here')")

	require.NoError(t, pg.StopKeep())
	_, err = os.Stat(filepath.Join(pg.Dir, "data", "PG_VERSION"))
	require.NoError(t, err, "the data directory is kept")
	_, err = pgx.Connect(ctx, pg.URL)
	require.Error(t, err, "the server is stopped")

	again, err := StartPostgres(ctx, root, pg.Dir, false)
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, again.URL)
	require.NoError(t, err)
	var v string
	require.NoError(t, conn.QueryRow(ctx, "SELECT v FROM kept").Scan(&v))
	conn.Close(ctx)
	require.Equal(t, "still here", v)

	require.NoError(t, again.Stop())
	stopped = true
	_, err = os.Stat(pg.Dir)
	require.True(t, os.IsNotExist(err), "Stop removes the directory: %v", err)
}
