package postgres_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
	"github.com/relaykit/relay/migrations"
)

// TestMigrateReport: a database two migrations behind gets those two, and
// says so; run again, nothing.
func TestMigrateReport(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.Postgres, goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	sources := p.ListSources()
	latest := sources[len(sources)-1].Version
	// Versions may skip numbers: two behind is the third from last.
	_, err = p.DownTo(ctx, sources[len(sources)-3].Version)
	require.NoError(t, err)

	s, err := postgres.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	res, err := s.MigrateReport(ctx)
	require.NoError(t, err)
	require.Equal(t, store.MigrateResult{Applied: 2, Version: latest}, res)
	res, err = s.MigrateReport(ctx)
	require.NoError(t, err)
	require.Equal(t, store.MigrateResult{Applied: 0, Version: latest}, res)
}

// Migration 26 builds its index concurrently, so a build that fails
// leaves it invalid (the planner never uses an invalid index); the next
// migrate drops that one and builds it again, and the index is there,
// valid, as the migration defines it.
func TestMigrateFailingAttemptsAfterAnInterruptedBuild(t *testing.T) {
	ctx := context.Background()
	s, conn, url := openWithConn(ctx, t)
	p, _ := migrator(t, url)
	now := time.Date(2026, 11, 30, 19, 0, 0, 0, time.UTC)
	hostWithDeliveries(ctx, t, s, "h-fail", now, "github:f:1", "github:f:2")
	_, err := conn.Exec(ctx, `UPDATE deliveries SET status = 'retrying', attempts = 4`)
	require.NoError(t, err)

	_, err = p.DownTo(ctx, 25)
	require.NoError(t, err)
	// An index of that name whose build failed: a unique one over two
	// equal keys.
	_, err = conn.Exec(ctx, `CREATE UNIQUE INDEX CONCURRENTLY deliveries_failing_attempts_idx ON deliveries (host_id) WHERE status = 'retrying'`)
	require.Error(t, err)
	valid := func() (ok bool, def string) {
		require.NoError(t, conn.QueryRow(ctx, `SELECT i.indisvalid, pg_get_indexdef(i.indexrelid) FROM pg_index i
			WHERE i.indexrelid = 'deliveries_failing_attempts_idx'::regclass`).Scan(&ok, &def))
		return ok, def
	}
	ok, _ := valid()
	require.False(t, ok, "left invalid")

	_, err = p.Up(ctx)
	require.NoError(t, err)
	ok, def := valid()
	require.True(t, ok)
	require.Contains(t, def, "(attempts, host_id, source) WHERE ((status = 'retrying'::text) AND (attempts >= 2))")
	fs, err := s.FailingSources(ctx, &store.FailingSourcesParams{MinAttempts: 3})
	require.NoError(t, err)
	require.Equal(t, []*store.SourceFailures{{HostID: "h-fail", Source: "github", Attempts: 4, Retrying: 2}}, fs)
}
