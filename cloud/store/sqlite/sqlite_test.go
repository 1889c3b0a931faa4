package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/sqlite"
	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
	"github.com/relaykit/relay/cloud/store/storetest"
	"github.com/relaykit/relay/migrations"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStore(t *testing.T) {
	ctx := context.Background()
	storetest.Exercise(ctx, t, func(t *testing.T) store.Store {
		path := filepath.Join(t.TempDir(), "cloud.db")
		s := sqlitetest.OpenAt(t, path)
		t.Cleanup(func() { requireEventsOwned(ctx, t, path) })
		return s
	})
}

// requireEventsOwned holds every test of the conformance suite to events
// written with their host and source (migration 31).
func requireEventsOwned(ctx context.Context, t *testing.T, path string) {
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	defer db.Close()
	storetest.RequireEventsOwned(ctx, t, db)
}

func TestOpenRejectsNonFilePaths(t *testing.T) {
	for _, path := range []string{"", ":memory:", "x.db?mode=ro"} {
		_, err := sqlite.Open(context.Background(), path)
		require.Error(t, err, path)
	}
}

// The quarantine's size and token_macs columns (migration 6) come and go
// with the data in place.
func TestMigrateQuarantine(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cloud.db")
	s, err := sqlite.Open(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.Migrate(ctx))
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	p, err := goose.NewProvider(goose.DialectSQLite3, db, migrations.SQLite, goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	storetest.MigrateQuarantine(ctx, t, s, storetest.GooseMigration(p, 5))
}
