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
		url := pgtest.NewDatabase(t)
		s, err := postgres.Open(ctx, url)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		t.Cleanup(func() { requireEventsOwned(ctx, t, url) })
		return s
	})
}

// requireEventsOwned holds every test of the conformance suite to events
// written with their host and source (migration 29).
func requireEventsOwned(ctx context.Context, t *testing.T, url string) {
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	defer db.Close()
	storetest.RequireEventsOwned(ctx, t, db)
}

// Events written before migration 29 have no host or source of their own.
func TestEventsWithoutOwners(t *testing.T) {
	ctx := context.Background()
	s, conn, _ := openWithConn(ctx, t)
	storetest.EventsWithoutOwners(ctx, t, s, func(ctx context.Context) error {
		_, err := conn.Exec(ctx, `UPDATE delivery_events SET host_id = NULL, source = NULL`)
		return err
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
func openStore(ctx context.Context, t testing.TB) (*postgres.Store, string) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	s, err := postgres.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s, url
}

// openWithConn opens a store on a new database (its migrations applied)
// and a connection of its own to it; it returns the database's URL too.
func openWithConn(ctx context.Context, t testing.TB) (*postgres.Store, *pgx.Conn, string) {
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

// hostWithDeliveries creates host hostID with a delivery of its github
// source for each id (the id its event id too), received at now.
func hostWithDeliveries(ctx context.Context, t testing.TB, s *postgres.Store, hostID string, now time.Time, ids ...string) {
	t.Helper()
	_, err := s.HostCreate(ctx, &store.HostCreateParams{ID: hostID, Name: hostID, Now: now})
	require.NoError(t, err)
	for _, id := range ids {
		_, err := s.DeliveryInsert(ctx, &store.DeliveryInsertParams{ID: id, HostID: hostID, Source: "github",
			EventID: id, Headers: map[string]string{"x-github-event": "push"}, RawBody: []byte(`{}`), ReceivedAt: now})
		require.NoError(t, err)
	}
}

// migrator returns goose's provider of the store's migrations at url, and
// its connection.
func migrator(t testing.TB, url string) (*goose.Provider, *sql.DB) {
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.Postgres, goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	return p, db
}

// Bodies moved out of the deliveries row (migration 5) keep their bytes, in
// both directions.
func TestMigrateBodies(t *testing.T) {
	ctx := context.Background()
	s, url := openStore(ctx, t)
	p, db := migrator(t, url)
	m := storetest.GooseMigration(p, 4)
	m.InlineBody = func(ctx context.Context, id string) (body []byte, err error) {
		err = db.QueryRowContext(ctx, `SELECT raw_body FROM deliveries WHERE delivery_id = $1`, id).Scan(&body)
		return body, err
	}
	storetest.MigrateBodies(ctx, t, s, m)
}

// The quarantine's size and token_macs columns (migration 7) come and go
// with the data in place.
func TestMigrateQuarantine(t *testing.T) {
	ctx := context.Background()
	s, url := openStore(ctx, t)
	p, _ := migrator(t, url)
	storetest.MigrateQuarantine(ctx, t, s, storetest.GooseMigration(p, 6))
}

func TestDeletesLeaveNothing(t *testing.T) {
	ctx := context.Background()
	s, conn, _ := openWithConn(ctx, t)
	storetest.DeletesLeaveNothing(ctx, t, s, func(ctx context.Context, table string, ids []string) (n int, err error) {
		err = conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()+` WHERE delivery_id = ANY($1)`, ids).Scan(&n)
		return n, err
	})
}

// A delivery's events and body go with it by a trigger, not by foreign keys
// (migration 15), which come back, with what they held, when it is undone
// (its result too, back in a table of its own: migration 16 undone).
func TestMigrateCascadeByTrigger(t *testing.T) {
	ctx := context.Background()
	s, conn, url := openWithConn(ctx, t)
	p, _ := migrator(t, url)
	foreignKeys := func() []string {
		rows, err := conn.Query(ctx, `SELECT conname FROM pg_constraint WHERE contype = 'f'
			AND conrelid::regclass::text IN ('delivery_events', 'delivery_results', 'delivery_bodies') ORDER BY conname`)
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
	storetest.DeletesLeaveNothing(ctx, t, s, count)
	held := func() (n int) {
		require.NoError(t, conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM delivery_events) + (SELECT count(*) FROM delivery_bodies)`).Scan(&n))
		return n
	}
	before := held()
	require.Positive(t, before)

	_, err := p.DownTo(ctx, 14)
	require.NoError(t, err)
	require.Equal(t, []string{"delivery_bodies_delivery_id_fkey", "delivery_events_delivery_id_fkey", "delivery_results_delivery_id_fkey"}, foreignKeys())
	require.Equal(t, before, held(), "what the foreign keys come back over is kept")

	_, err = p.Up(ctx)
	require.NoError(t, err)
	require.Empty(t, foreignKeys())
	// A host removed takes its deliveries (a foreign key's cascade), and
	// the trigger takes what they held.
	_, err = conn.Exec(ctx, `DELETE FROM hosts WHERE id = 'h-delete'`)
	require.NoError(t, err)
	for _, table := range []string{"delivery_bodies", "delivery_events"} {
		var orphans int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM `+table+` x
			WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.delivery_id = x.delivery_id)`).Scan(&orphans))
		require.Zero(t, orphans, table)
	}
	require.Less(t, held(), before)
}

// A delivery's last result moves into its row (migration 16), and back into
// a table of its own when that is undone, as reported either way.
func TestMigrateResultIntoDelivery(t *testing.T) {
	ctx := context.Background()
	s, conn, url := openWithConn(ctx, t)
	p, _ := migrator(t, url)
	now := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	hostWithDeliveries(ctx, t, s, "h-result", now, "github:r:1", "github:n:1")
	status := 500
	want := store.DeliveryResult{DeliveryID: "github:r:1", Attempt: 3, Result: "error", Handler: "forward http://127.0.0.1:3000/",
		ResponseStatus: &status, DurationMS: 40, Error: "status 500", ReportedAt: now}
	_, err := s.DeliveryReport(ctx, &store.DeliveryReportParams{HostID: "h-result", Results: []store.DeliveryResult{want}})
	require.NoError(t, err)

	_, err = p.DownTo(ctx, 15)
	require.NoError(t, err)
	var kept store.DeliveryResult
	require.NoError(t, conn.QueryRow(ctx, `SELECT delivery_id, attempt, result, handler, response_status, exit_code,
		duration_ms, error, reported_at FROM delivery_results`).Scan(&kept.DeliveryID, &kept.Attempt, &kept.Result,
		&kept.Handler, &kept.ResponseStatus, &kept.ExitCode, &kept.DurationMS, &kept.Error, &kept.ReportedAt))
	kept.ReportedAt = kept.ReportedAt.UTC()
	require.Equal(t, want, kept, "the one result back in its table")
	var rows int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM delivery_results`).Scan(&rows))
	require.Equal(t, 1, rows, "none for the delivery without one")

	_, err = p.Up(ctx)
	require.NoError(t, err)
	got, err := s.DeliveryResultGet(ctx, want.DeliveryID)
	require.NoError(t, err)
	require.Equal(t, want, *got)
	_, err = s.DeliveryResultGet(ctx, "github:n:1")
	require.ErrorIs(t, err, store.ErrNotFound, "none reported")
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
