package postgres_test

import (
	"context"
	"database/sql"
	"testing"

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
	// Numbers may skip: two migrations behind is the third-last's version.
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
