package sqlite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// laterColumns came with migrations after those the dumps compare across,
// and go with a migration down past them: left out of the dumps.
var laterColumns = map[string]bool{"body_sha256": true, "group_id": true, "lane": true, "codec": true}

// dump is every row of table with its rowid, in rowid order.
func dump(ctx context.Context, t *testing.T, s *Store, table string) [][]any {
	t.Helper()
	rows, err := s.read.QueryContext(ctx, `SELECT rowid, * FROM `+table+` ORDER BY rowid`)
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var out [][]any
	for rows.Next() {
		row := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range row {
			ptrs[i] = &row[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		kept := row[:0:0]
		for i, v := range row {
			if !laterColumns[cols[i]] {
				kept = append(kept, v)
			}
		}
		out = append(out, kept)
	}
	require.NoError(t, rows.Err())
	return out
}

// schemaOf is the SQL of table's indexes and triggers, sorted by name.
func schemaOf(ctx context.Context, t *testing.T, s *Store, table string) []string {
	t.Helper()
	rows, err := s.read.QueryContext(ctx, `SELECT type || ' ' || name || ': ' || coalesce(sql, '') FROM sqlite_schema
		WHERE tbl_name = ? AND type IN ('index', 'trigger') ORDER BY name`, table)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// Deliveries keyed by their received millisecond (migration 16) keep every
// row, rowid, column and result, in both directions; delivery ids stay
// distinct; a delivery's body, events and result go with it.
func TestMigrateDeliveryKeys(t *testing.T) {
	ctx := context.Background()
	s, now, ids := trailed(ctx, t, 4)
	other := eventsOf(ctx, t, s, "h-b", 2, now.Add(time.Second))
	_, err := s.DeliveryReport(ctx, &store.DeliveryReportParams{HostID: "h-a", Results: []store.DeliveryResult{
		{DeliveryID: ids[0], Attempt: 1, Result: "ok", Handler: "deploy", ReportedAt: now},
		{DeliveryID: ids[1], Attempt: 1, Result: "failed", Error: "exit 1", ReportedAt: now},
	}})
	require.NoError(t, err)
	// The rows as migration 30 leaves them: 31 gives events their host
	// and source, columns the migrations below predate.
	p := migrator(t, s)
	_, err = p.DownTo(ctx, 30)
	require.NoError(t, err)
	tables := []string{"deliveries", "delivery_results", "delivery_events", "delivery_bodies"}
	before := map[string][][]any{}
	for _, table := range tables {
		before[table] = dump(ctx, t, s, table)
	}
	require.Len(t, before["delivery_results"], 2)
	newIndexes := schemaOf(ctx, t, s, "deliveries")

	_, err = p.DownTo(ctx, 15)
	require.NoError(t, err)
	for _, table := range tables {
		require.Equal(t, before[table], dump(ctx, t, s, table), "%s down", table)
	}
	oldIndexes := schemaOf(ctx, t, s, "deliveries")
	require.Contains(t, oldIndexes, "index sqlite_autoindex_deliveries_1: ", "the primary key is back")
	require.Equal(t, []string{"SEARCH deliveries USING INDEX sqlite_autoindex_deliveries_1 (delivery_id=?)"},
		queryPlan(ctx, t, s, `SELECT host_id FROM deliveries WHERE delivery_id = ?`, ids[0]))
	// The result's foreign key holds again: it goes with its delivery.
	_, err = s.write.ExecContext(ctx, `DELETE FROM deliveries WHERE delivery_id = ?`, ids[1])
	require.NoError(t, err)
	var n int
	require.NoError(t, s.read.QueryRowContext(ctx, `SELECT count(*) FROM delivery_results`).Scan(&n))
	require.Equal(t, 1, n)
	for _, table := range tables {
		before[table] = dump(ctx, t, s, table)
	}

	_, err = p.UpTo(ctx, 30)
	require.NoError(t, err)
	for _, table := range tables {
		require.Equal(t, before[table], dump(ctx, t, s, table), "%s up", table)
	}
	_, err = p.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, newIndexes, schemaOf(ctx, t, s, "deliveries"))
	for _, idx := range newIndexes {
		require.NotContains(t, idx, "(delivery_id)", "no index led by the random id")
	}
	// Rowids go on from the table's largest; every transition still works.
	later := eventsOf(ctx, t, s, "h-c", 2, now.Add(time.Hour))
	var rowid, largest int64
	require.NoError(t, s.read.QueryRowContext(ctx, `SELECT rowid FROM deliveries WHERE `+idKey, later[0], later[0]).Scan(&rowid))
	largest = before["deliveries"][len(before["deliveries"])-1][0].(int64)
	require.Greater(t, rowid, largest)

	// Delivery ids stay distinct.
	_, err = s.write.ExecContext(ctx, `INSERT INTO deliveries (delivery_id, host_id, source, event_id, headers, body_size,
		status, max_attempts, received_at, updated_at) VALUES (?, 'h-a', 'github', 'another', '{}', 0, 'queued', 1, 0, 0)`, ids[0])
	require.ErrorContains(t, err, "UNIQUE constraint failed")

	// A delivery deleted takes its result, events and body along, and
	// nothing else's.
	_, err = s.write.ExecContext(ctx, `DELETE FROM hosts WHERE id = 'h-b'`)
	require.NoError(t, err)
	for _, id := range other {
		_, err := s.DeliveryGet(ctx, "h-b", id)
		require.ErrorIs(t, err, store.ErrNotFound)
	}
	_, err = s.write.ExecContext(ctx, `DELETE FROM deliveries WHERE rowid = (SELECT rowid FROM deliveries WHERE `+idKey+`)`, ids[0], ids[0])
	require.NoError(t, err)
	require.NoError(t, s.read.QueryRowContext(ctx, `SELECT count(*) FROM delivery_results`).Scan(&n))
	require.Equal(t, 0, n)
	evs, err := s.DeliveryEventList(ctx, ids[0])
	require.NoError(t, err)
	require.Empty(t, evs)
	require.NoError(t, s.read.QueryRowContext(ctx, `SELECT count(*) FROM delivery_bodies`).Scan(&n))
	require.Equal(t, len(ids)-2+len(later), n, "the bodies of h-a's two left and h-c's")
	for _, id := range append(ids[2:], later...) {
		host := "h-a"
		if strings.Contains(id, ":h-c-") {
			host = "h-c"
		}
		d, err := s.DeliveryGet(ctx, host, id)
		require.NoError(t, err, id)
		require.Equal(t, id, d.ID)
	}
}

// A repeat of an event, found by the insert itself, leaves no body behind;
// nor does a delivery id taken by another host's delivery, which moves on.
func TestRepeatLeavesNoBody(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	now := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	createHosts(ctx, t, s, now, "h-a", "h-b")
	insert := func(host string) *store.DeliveryInsertResult {
		res, err := s.DeliveryInsert(ctx, &store.DeliveryInsertParams{ID: store.DeliveryID("github", "ev", now), HostID: host,
			Source: "github", EventID: "ev", RawBody: []byte("body of " + host), ReceivedAt: now, Headers: map[string]string{}})
		require.NoError(t, err)
		return res
	}
	first := insert("h-a")
	require.Equal(t, store.InsertQueued, first.Outcome)
	require.Equal(t, store.InsertDuplicate, insert("h-a").Outcome)
	other := insert("h-b")
	require.Equal(t, store.InsertQueued, other.Outcome)
	require.NotEqual(t, first.Delivery.ID, other.Delivery.ID, "moved on a millisecond")
	var bodies int
	require.NoError(t, s.read.QueryRowContext(ctx, `SELECT count(*) FROM delivery_bodies`).Scan(&bodies))
	require.Equal(t, 2, bodies)
	for host, id := range map[string]string{"h-a": first.Delivery.ID, "h-b": other.Delivery.ID} {
		d, err := s.DeliveryGet(ctx, host, id)
		require.NoError(t, err)
		require.Equal(t, "body of "+host, string(d.RawBody))
	}
}

// A batch of new deliveries, repeats within it and ids taken within it
// (another host's delivery of the same event in the same millisecond):
// each is answered as one alone would be, with its body and "received"
// event (more than one statement's worth), and a repeat leaves no body.
func TestBatchKeysWithin(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	now := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	createHosts(ctx, t, s, now, "a", "b")
	param := func(host string, i int) *store.DeliveryInsertParams {
		ev := fmt.Sprintf("ev-%02d", i)
		return &store.DeliveryInsertParams{ID: store.DeliveryID("github", ev, now), HostID: host, Source: "github",
			EventID: ev, RawBody: []byte(host + ev), ReceivedAt: now, Headers: map[string]string{}}
	}
	// Host a's ten, a repeat of one, host b's ten, their ids taken by a's.
	var ps []*store.DeliveryInsertParams
	for _, h := range []string{"a", "b"} {
		for i := range 10 {
			ps = append(ps, param(h, i))
		}
	}
	ps = append(ps, param("a", 2))
	require.Greater(t, len(ps), eventsPerInsert)
	res, err := s.DeliveryInsertBatch(ctx, ps)
	require.NoError(t, err)
	ids := map[string]bool{}
	for i, r := range res[:20] {
		require.Equal(t, store.InsertQueued, r.Outcome, "row %d", i)
		require.False(t, ids[r.Delivery.ID], "ids distinct")
		ids[r.Delivery.ID] = true
		d, err := s.DeliveryGet(ctx, ps[i].HostID, r.Delivery.ID)
		require.NoError(t, err)
		require.Equal(t, string(ps[i].RawBody), string(d.RawBody))
		require.Equal(t, ps[i].EventID, d.EventID)
		evs, err := s.DeliveryEventList(ctx, r.Delivery.ID)
		require.NoError(t, err)
		require.Len(t, evs, 1)
	}
	require.NotEqual(t, ps[10].ID, res[10].Delivery.ID, "b's moved on a millisecond")
	require.Equal(t, store.InsertDuplicate, res[20].Outcome)
	require.Equal(t, res[2].Delivery.ID, res[20].Delivery.ID)
	var bodies int
	require.NoError(t, s.read.QueryRowContext(ctx, `SELECT count(*) FROM delivery_bodies`).Scan(&bodies))
	require.Equal(t, 20, bodies)
}

// createHosts creates a host of each id, named as its id.
func createHosts(ctx context.Context, t *testing.T, s *Store, now time.Time, ids ...string) {
	t.Helper()
	for _, h := range ids {
		_, err := s.HostCreate(ctx, &store.HostCreateParams{ID: h, Name: h, Now: now})
		require.NoError(t, err)
	}
}

// Results keyed as their deliveries are (migration 19) keep every row and
// rowid in both directions; a result is found, replaced and deleted with
// its delivery by that key.
func TestMigrateResultKeys(t *testing.T) {
	ctx := context.Background()
	s, now, ids := trailed(ctx, t, 4)
	report := func(id, result string) {
		t.Helper()
		_, err := s.DeliveryReport(ctx, &store.DeliveryReportParams{HostID: "h-a", Results: []store.DeliveryResult{
			{DeliveryID: id, Attempt: 1, Result: result, Handler: "deploy", ReportedAt: now}}})
		require.NoError(t, err)
	}
	report(ids[0], "ok")
	report(ids[1], "failed")
	before := dump(ctx, t, s, "delivery_results")
	require.Len(t, before, 2)
	keyed := schemaOf(ctx, t, s, "delivery_results")
	require.Equal(t, []string{"index delivery_results_key_idx: CREATE UNIQUE INDEX delivery_results_key_idx ON delivery_results (substr(delivery_id, -13), delivery_id)"}, keyed)
	require.Equal(t, []string{"SEARCH delivery_results USING INDEX delivery_results_key_idx (<expr>=? AND delivery_id=?)"},
		queryPlan(ctx, t, s, `SELECT result FROM delivery_results WHERE `+idKey, ids[0], ids[0]))

	p := migrator(t, s)
	_, err := p.DownTo(ctx, 18)
	require.NoError(t, err)
	require.Equal(t, before, dump(ctx, t, s, "delivery_results"), "down")
	require.Contains(t, schemaOf(ctx, t, s, "delivery_results"), "index sqlite_autoindex_delivery_results_1: ", "the primary key is back")
	_, err = s.write.ExecContext(ctx, `DELETE FROM deliveries WHERE delivery_id = ?`, ids[1])
	require.NoError(t, err)
	before = dump(ctx, t, s, "delivery_results")
	require.Len(t, before, 1, "the old trigger deletes a result with its delivery")

	_, err = p.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, before, dump(ctx, t, s, "delivery_results"), "up")
	require.Equal(t, keyed, schemaOf(ctx, t, s, "delivery_results"))

	// A result reported again replaces the one before; another delivery's
	// result is a row of its own; a delivery deleted takes its result along.
	report(ids[0], "ok again")
	report(ids[2], "ok")
	r, err := s.DeliveryResultGet(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, "ok again", r.Result)
	require.Len(t, dump(ctx, t, s, "delivery_results"), 2)
	_, err = s.write.ExecContext(ctx, `DELETE FROM deliveries WHERE rowid = (SELECT rowid FROM deliveries WHERE `+idKey+`)`, ids[0], ids[0])
	require.NoError(t, err)
	_, err = s.DeliveryResultGet(ctx, ids[0])
	require.ErrorIs(t, err, store.ErrNotFound)
	r, err = s.DeliveryResultGet(ctx, ids[2])
	require.NoError(t, err)
	require.Equal(t, "ok", r.Result)
}
