package postgres_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
	"github.com/relaykit/relay/cloud/store/storetest"
	"github.com/relaykit/relay/migrations"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStore(t *testing.T) {
	pgtest.ServerURL(t) // skip (or fail) once, not in every subtest
	ctx := context.Background()
	storetest.Exercise(ctx, t, func(t *testing.T) store.Store {
		s, err := postgres.Open(ctx, pgtest.NewDatabase(t))
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		return s
	})
}

// Webhook bodies are lz4-compressed where the server supports it (this
// test server does).
func TestBodiesUseLZ4(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	for table, column := range map[string]string{"delivery_bodies": "raw_body", "quarantine": "body"} {
		var method string
		require.NoError(t, conn.QueryRow(ctx, `SELECT attcompression::text FROM pg_attribute
			WHERE attrelid = $1::regclass AND attname = $2`, table, column).Scan(&method))
		require.Equal(t, "l", method, "%s.%s", table, column)
	}
}

// openStore opens a store on a new database, and returns its URL too.
func openStore(ctx context.Context, t *testing.T) (*postgres.Store, string) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	s, err := postgres.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s, url
}

// openWithConn opens a store on a new database (its migrations applied)
// and a connection of its own to it; it returns the database's URL too.
func openWithConn(ctx context.Context, t *testing.T) (*postgres.Store, *pgx.Conn, string) {
	t.Helper()
	s, url := openStore(ctx, t)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(ctx) })
	return s, conn, url
}

// explain returns the plan of query, one line a node.
func explain(ctx context.Context, t *testing.T, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, query string, args ...any) string {
	t.Helper()
	rows, err := q.Query(ctx, `EXPLAIN `+query, args...)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}

// Bodies moved out of the deliveries row (migration 5) keep their bytes, in
// both directions.
func TestMigrateBodies(t *testing.T) {
	ctx := context.Background()
	s, url := openStore(ctx, t)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.Postgres, goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	storetest.MigrateBodies(ctx, t, s, storetest.Migration{
		Down: func(ctx context.Context) error { _, err := p.DownTo(ctx, 4); return err },
		Up:   func(ctx context.Context) error { _, err := p.Up(ctx); return err },
		InlineBody: func(ctx context.Context, id string) (body []byte, err error) {
			err = db.QueryRowContext(ctx, `SELECT raw_body FROM deliveries WHERE delivery_id = $1`, id).Scan(&body)
			return body, err
		},
	})
}

// The quarantine's size and token_macs columns (migration 7) come and go
// with the data in place.
func TestMigrateQuarantine(t *testing.T) {
	ctx := context.Background()
	s, url := openStore(ctx, t)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.Postgres, goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	storetest.MigrateQuarantine(ctx, t, s, storetest.Migration{
		Down: func(ctx context.Context) error { _, err := p.DownTo(ctx, 6); return err },
		Up:   func(ctx context.Context) error { _, err := p.Up(ctx); return err },
	})
}

func TestDeletesLeaveNothing(t *testing.T) {
	ctx := context.Background()
	s, conn, _ := openWithConn(ctx, t)
	storetest.DeletesLeaveNothing(ctx, t, s, func(ctx context.Context, table string, ids []string) (n int, err error) {
		err = conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()+` WHERE delivery_id = ANY($1)`, ids).Scan(&n)
		return n, err
	})
}

// A delivery's events, result and body go with it by a trigger, not by
// foreign keys (migration 15), which come back, with what they held, when
// it is undone; deletes leave nothing either way.
func TestMigrateCascadeByTrigger(t *testing.T) {
	ctx := context.Background()
	s, conn, url := openWithConn(ctx, t)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.Postgres, goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	foreignKeys := func() []string {
		rows, err := conn.Query(ctx, `SELECT conname FROM pg_constraint WHERE contype = 'f'
			AND conrelid IN ('delivery_events'::regclass, 'delivery_results'::regclass, 'delivery_bodies'::regclass) ORDER BY conname`)
		require.NoError(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return names
	}
	count := func(ctx context.Context, table string, ids []string) (n int, err error) {
		err = conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()+` WHERE delivery_id = ANY($1)`, ids).Scan(&n)
		return n, err
	}
	require.Empty(t, foreignKeys())

	_, err = p.DownTo(ctx, 14)
	require.NoError(t, err)
	require.Equal(t, []string{"delivery_bodies_delivery_id_fkey", "delivery_events_delivery_id_fkey", "delivery_results_delivery_id_fkey"}, foreignKeys())
	storetest.DeletesLeaveNothing(ctx, t, s, count)

	_, err = p.Up(ctx)
	require.NoError(t, err)
	require.Empty(t, foreignKeys())
	// A host removed takes its deliveries (a foreign key's cascade), and
	// the trigger takes what they held.
	_, err = conn.Exec(ctx, `DELETE FROM hosts WHERE id = 'h-delete'`)
	require.NoError(t, err)
	for _, table := range []string{"delivery_bodies", "delivery_events", "delivery_results"} {
		var orphans int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM `+table+` x
			WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.delivery_id = x.delivery_id)`).Scan(&orphans))
		require.Zero(t, orphans, table)
	}
	storetest.DeletesLeaveNothing(ctx, t, s, count)
}

// Retention reads the partial index of the status it prunes: those indexes
// hold nothing else, so no other transition writes them.
func TestPruneUsesItsStatusIndex(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(ctx) })
	// An empty table is cheapest to scan whole; forbid that, so the plan
	// shows which index the query can use.
	_, err = conn.Exec(ctx, `SET enable_seqscan = off`)
	require.NoError(t, err)
	for _, status := range store.PrunableStatuses {
		require.Contains(t, explain(ctx, t, conn, postgres.PruneQuery(status), time.Now(), 10), "deliveries_"+string(status)+"_idx", "status %s", status)
	}
}
