package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
	"github.com/relaykit/relay/cloud/store/storetest"
	"github.com/relaykit/relay/migrations"
	"github.com/relaykit/relay/shared/dbfile/dbfiletest"
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
	require.Equal(t, "2", pragma(s.ckpt, "synchronous"), "FULL: the checkpointer fsyncs the database before the WAL may start over")
	require.Equal(t, 1, s.ckpt.Stats().MaxOpenConnections, "one checkpointer")
	require.Equal(t, "1", pragma(s.write, "foreign_keys"))
	require.Equal(t, "10000", pragma(s.write, "busy_timeout"))
	require.Equal(t, "1", pragma(s.read, "foreign_keys"))
	require.Equal(t, "1", pragma(s.read, "query_only"))
	require.Equal(t, 1, s.write.Stats().MaxOpenConnections, "one writer")
	require.Equal(t, "-2048", pragma(s.write, "cache_size"), "2 MiB of pages for the writer")
	require.Equal(t, "-1024", pragma(s.read, "cache_size"), "1 MiB for each reader")
	require.Equal(t, "20000", pragma(s.write, "wal_autocheckpoint"), "a backstop: the checkpointer copies the WAL at 10,000 pages")
	require.Equal(t, "2", pragma(s.write, "temp_store"), "MEMORY: statement journals make no system calls")

	_, err = s.read.ExecContext(ctx, "CREATE TABLE x (y INTEGER)")
	require.Error(t, err, "the read pool cannot write")
}

// The page caches, most of what the embedded cloud holds, are what the
// options say, on every connection of both pools.
func TestPragmasCache(t *testing.T) {
	ctx := context.Background()
	s, err := OpenWith(ctx, filepath.Join(t.TempDir(), "cloud.db"), Options{CacheMB: 96})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	var v string
	require.NoError(t, s.write.QueryRowContext(ctx, "PRAGMA cache_size").Scan(&v))
	require.Equal(t, "-98304", v)
	// Hold every reader at once, so each is asked.
	conns := make([]*sql.Conn, s.read.Stats().MaxOpenConnections)
	for i := range conns {
		c, err := s.read.Conn(ctx)
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.QueryRowContext(ctx, "PRAGMA cache_size").Scan(&v))
		require.Equal(t, "-12288", v, "reader %d: an eighth", i)
		conns[i] = c
	}
}

// A lease reads the partial index of available deliveries, not every
// delivery the host ever had.
func TestLeaseUsesTheAvailableIndex(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	require.Equal(t, []string{"SEARCH deliveries USING INDEX deliveries_available_idx (host_id=?)"},
		queryPlan(ctx, t, s, leaseCandidates, "h", 0, 10))
}

// Retention reads the partial index of the status it prunes: those indexes
// hold nothing else, so no other transition writes them.
func TestPruneUsesItsStatusIndex(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	for _, status := range store.PrunableStatuses {
		require.Equal(t, []string{"SEARCH deliveries USING COVERING INDEX deliveries_" + string(status) + "_idx (updated_at<?)"},
			queryPlan(ctx, t, s, numbered(flow.PruneQuery(flowDB{}, status)), 0, 10), "status %s", status)
	}
}

// The alert evaluator's reads of deliveries (every 15 s) walk the indexes
// of the statuses they count, or step into a host's part of one, never
// every delivery kept.
func TestAlertReadsUseStatusIndexes(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	for name, plan := range map[string][]string{
		"failing sources": queryPlan(ctx, t, s, failingQuery, 3, 10),
		"backlog":         queryPlan(ctx, t, s, backlogQuery, 0, 10),
	} {
		for _, step := range plan {
			if strings.Contains(step, "deliveries") {
				require.Regexp(t, `deliveries_(failing|failing_attempts|available|lease|dlq)_idx|deliveries_host_status_idx \(host_id=\? AND status=\?\)`, step, "%s: %q", name, plan)
			}
		}
	}
	failing := queryPlan(ctx, t, s, failingQuery, 3, 10)
	require.Contains(t, failing, "SEARCH deliveries USING COVERING INDEX deliveries_failing_attempts_idx (attempts>?)",
		"the retrying deliveries past the threshold, a range of their index, the table not read: %q", failing)
	require.Contains(t, failing, "SEARCH d USING COVERING INDEX deliveries_failing_idx (host_id=? AND source=?)",
		"a failing source's retrying deliveries, a range of their index, the table not read: %q", failing)
	backlog := queryPlan(ctx, t, s, backlogQuery, 0, 10)
	require.NotContains(t, backlog, "SCAN deliveries", "%q", backlog)
}

// The firing alerts (the evaluator's list, every 15 s) are read from the
// partial index of firing alerts, not by walking every alert ever raised,
// newest first; the history pages by id.
func TestAlertListUsesTheFiringIndex(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	firing := queryPlan(ctx, t, s, alertListQuery(true), 1<<62, 100)
	require.Contains(t, firing, "SCAN alerts USING INDEX alerts_firing_idx", "%q", firing)
	for _, step := range firing {
		require.NotContains(t, step, "INTEGER PRIMARY KEY", "%q", firing)
	}
	require.Equal(t, []string{"SEARCH alerts USING INTEGER PRIMARY KEY (rowid<?)"},
		queryPlan(ctx, t, s, alertListQuery(false), 1<<62, 100))
}

// The quarantine's bound, checked on the writer for each request
// quarantined, reads the index of hosts and sizes, not every body held.
func TestQuarantineBoundReadsTheSizeIndex(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	require.Equal(t, []string{"SCAN quarantine USING COVERING INDEX quarantine_host_size_idx"},
		queryPlan(ctx, t, s, quarantineHeldQuery, "h", "h"))
}

// migrated opens a store on a new file, with every migration applied.
func migrated(ctx context.Context, t *testing.T) *Store {
	t.Helper()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "cloud.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.Migrate(ctx))
	return s
}

// migrator is goose's provider of the store's migrations, on its writer.
func migrator(t testing.TB, s *Store) *goose.Provider {
	t.Helper()
	p, err := goose.NewProvider(goose.DialectSQLite3, s.write, migrations.SQLite, goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	return p
}

// queryPlan is the detail column of EXPLAIN QUERY PLAN for query.
func queryPlan(ctx context.Context, t *testing.T, s *Store, query string, args ...any) []string {
	t.Helper()
	return dbfiletest.QueryPlan(t, s.read, query, args...)
}

// Bodies moved out of the deliveries row (migration 4) keep their bytes, in
// both directions.
func TestMigrateBodies(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	p := migrator(t, s)
	m := storetest.GooseMigration(p, 3)
	m.InlineBody = func(ctx context.Context, id string) (body []byte, err error) {
		err = s.write.QueryRowContext(ctx, `SELECT raw_body FROM deliveries WHERE delivery_id = ?`, id).Scan(&body)
		return body, err
	}
	storetest.MigrateBodies(ctx, t, s, m)
}

// Events written before migration 31 have no host or source of their own.
func TestEventsWithoutOwners(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	storetest.EventsWithoutOwners(ctx, t, s, func(ctx context.Context) error {
		_, err := s.write.ExecContext(ctx, `UPDATE delivery_events SET host_id = NULL, source = NULL`)
		return err
	})
}

func TestDeletesLeaveNothing(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	storetest.DeletesLeaveNothing(ctx, t, s, func(ctx context.Context, table string, ids []string) (n int, err error) {
		args := make([]any, len(ids))
		for i, id := range ids {
			args[i] = id
		}
		if table == "delivery_bodies" {
			// Bodies are keyed by the delivery's body_id: those of the
			// deliveries, and any a deleted delivery left behind.
			err = s.read.QueryRowContext(ctx, `SELECT
				(SELECT count(*) FROM deliveries d JOIN delivery_bodies b ON b.id = d.body_id
					WHERE d.delivery_id IN (`+placeholders(len(ids))+`))
				+ (SELECT count(*) FROM delivery_bodies WHERE id NOT IN (SELECT body_id FROM deliveries WHERE body_id IS NOT NULL))`,
				args...).Scan(&n)
			return n, err
		}
		err = s.read.QueryRowContext(ctx, `SELECT count(*) FROM `+table+` WHERE delivery_id IN (`+placeholders(len(ids))+`)`, args...).Scan(&n)
		return n, err
	})
}

// Bodies are keyed by their own integer (migration 7), not by the delivery:
// a delivery deleted by its host's cascade takes its body along too, and
// nothing else's.
func TestBodiesGoWithTheirDeliveries(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	now := time.Now()
	for _, h := range []string{"h-gone", "h-kept"} {
		_, err := s.HostCreate(ctx, &store.HostCreateParams{ID: h, Name: h, Now: now})
		require.NoError(t, err)
		for i := range 3 {
			ev := fmt.Sprintf("%s-%d", h, i)
			_, err := s.DeliveryInsert(ctx, &store.DeliveryInsertParams{ID: store.DeliveryID("github", ev, now), HostID: h,
				Source: "github", EventID: ev, RawBody: []byte(ev), ReceivedAt: now, Headers: map[string]string{}})
			require.NoError(t, err)
		}
	}
	bodies := func() (n int) {
		require.NoError(t, s.read.QueryRowContext(ctx, `SELECT count(*) FROM delivery_bodies`).Scan(&n))
		return n
	}
	require.Equal(t, 6, bodies())
	_, err := s.write.ExecContext(ctx, `DELETE FROM hosts WHERE id = 'h-gone'`)
	require.NoError(t, err)
	require.Equal(t, 3, bodies())
	d, err := s.DeliveryGet(ctx, "h-kept", store.DeliveryID("github", "h-kept-1", now))
	require.NoError(t, err)
	require.Equal(t, "h-kept-1", string(d.RawBody))
}

// The operator's lookups read an index: by event id (the delivery key, per
// source), by correlation id (its own index, with a host or a group too),
// a host's newest, everyone's newest, the audit trail after an id.
func TestFindUsesIndexes(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	plan := func(p store.DeliveryFindParams) string {
		q, args := findQuery(&p)
		return strings.Join(queryPlan(ctx, t, s, q, args...), "; ")
	}
	// By event id: the hosts' key and the groups' key, each a range that
	// leads with it, not a look-up per source.
	byEvent := plan(store.DeliveryFindParams{EventID: "e"})
	require.Contains(t, byEvent, "USING INDEX deliveries_event_idx (event_id=?)")
	require.Contains(t, byEvent, "USING INDEX deliveries_group_event_idx (event_id=?)")
	require.NotContains(t, byEvent, "sources")
	require.NotContains(t, byEvent, "SCAN deliveries")
	require.Contains(t, plan(store.DeliveryFindParams{GroupID: "g"}), "USING INDEX deliveries_group_received_idx (group_id=?)")
	for _, p := range []store.DeliveryFindParams{{CorrelationID: "c"}, {HostID: "h", CorrelationID: "c"}, {GroupID: "g", CorrelationID: "c"},
		{Status: store.StatusQueued, CorrelationID: "c"}} {
		require.Regexp(t, `^SEARCH deliveries USING INDEX deliveries_correlation_idx \(correlation_id=\?\); USE TEMP B-TREE FOR ORDER BY$`, plan(p), "%+v", p)
	}
	require.Contains(t, plan(store.DeliveryFindParams{HostID: "h"}), "USING INDEX deliveries_host_received_idx (host_id=?)")
	// A host's deliveries in one status: that index, in order, whatever the
	// status's share (no statistics say it), with no sort.
	hostStatus := plan(store.DeliveryFindParams{HostID: "h", Status: store.StatusDelivering})
	require.Contains(t, hostStatus, "USING INDEX deliveries_host_status_idx (host_id=? AND status=?)")
	require.NotContains(t, hostStatus, "TEMP B-TREE")
	before := time.Now()
	hostStatus = plan(store.DeliveryFindParams{HostID: "h", Status: store.StatusDelivering, BeforeReceivedAt: &before, BeforeID: "x"})
	require.Contains(t, hostStatus, "USING INDEX deliveries_host_status_idx (host_id=? AND status=? AND")
	require.NotContains(t, hostStatus, "TEMP B-TREE")
	require.Equal(t, "SCAN deliveries USING INDEX deliveries_received_idx", plan(store.DeliveryFindParams{}))
	events := func(p store.DeliveryEventListAfterParams) string {
		q, args := store.EventsQuery(&p, eventsDelivery)
		return strings.Join(queryPlan(ctx, t, s, q, args...), "; ")
	}
	require.Contains(t, events(store.DeliveryEventListAfterParams{AfterID: 7}), "SEARCH delivery_events USING INTEGER PRIMARY KEY (rowid>?)")
	// The newest: the rowid order read backwards up to the limit, unsorted;
	// the one sort is of the page read (at most 500), oldest first. An
	// event written before events carried their host and source finds its
	// delivery by its key (each look-up is a subquery of its own, run only
	// for such an event).
	newest := events(store.DeliveryEventListAfterParams{Newest: true})
	require.True(t, strings.HasPrefix(newest, "CO-ROUTINE e; SCAN delivery_events; SCAN e; "), newest)
	require.True(t, strings.HasSuffix(newest, "; USE TEMP B-TREE FOR ORDER BY"), newest)
	require.Equal(t, 1, strings.Count(newest, "TEMP B-TREE"), newest)
	require.NotRegexp(t, `\bSCAN d\b`, newest, "no delivery read but by its key")
	require.Equal(t, 2, strings.Count(newest, "SEARCH d USING "), newest)
	require.Equal(t, 2, strings.Count(newest, " INDEX deliveries_key_idx (<expr>=? AND delivery_id=?)"), newest)
}

// A host's deliveries (GET /api/hosts/:id/deliveries) read an index in
// order whatever the filters: in one status, that status's part of the
// host's deliveries, never every delivery the host has kept.
func TestListUsesIndexes(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	plan := func(p store.DeliveryListParams) string {
		q, args := listQuery(&p)
		return strings.Join(queryPlan(ctx, t, s, q, args...), "; ")
	}
	before := time.Now()
	require.Equal(t, "SEARCH deliveries USING INDEX deliveries_host_received_idx (host_id=?)", plan(store.DeliveryListParams{HostID: "h"}))
	require.Equal(t, "SEARCH deliveries USING INDEX deliveries_host_received_idx (host_id=?)", plan(store.DeliveryListParams{HostID: "h", Source: "github"}))
	require.Equal(t, "SEARCH deliveries USING INDEX deliveries_host_received_idx (host_id=? AND (received_at,delivery_id)<(?,?))",
		plan(store.DeliveryListParams{HostID: "h", BeforeReceivedAt: &before, BeforeID: "x"}))
	for _, st := range store.Statuses {
		for _, p := range []store.DeliveryListParams{
			{HostID: "h", Status: st},
			{HostID: "h", Status: st, Source: "github"},
		} {
			require.Equal(t, "SEARCH deliveries USING INDEX deliveries_host_status_idx (host_id=? AND status=?)", plan(p), "%+v", p)
		}
		p := store.DeliveryListParams{HostID: "h", Status: st, BeforeReceivedAt: &before, BeforeID: "x"}
		require.Equal(t, "SEARCH deliveries USING INDEX deliveries_host_status_idx (host_id=? AND status=? AND (received_at,delivery_id)<(?,?))", plan(p), "%+v", p)
	}
}

// Deliveries in a status on every host are read from each host's part of
// that status's index, in order, never by walking everyone's deliveries
// newest first until a page of that status turns up; with a source, the
// walk stays (the delivery key's index, led by host and source, would read
// every delivery of the source).
func TestFindByStatusReadsEachHost(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	plan := func(p store.DeliveryFindParams) string {
		q, args := findQuery(&p)
		return strings.Join(queryPlan(ctx, t, s, q, args...), "; ")
	}
	before, since := time.Now(), time.Now().Add(-time.Hour)
	for _, st := range store.Statuses {
		if st == store.StatusDLQ {
			// The dead letters have an index of their own, in receipt
			// order: every host's, read in order (scale_plan_test.go).
			got := plan(store.DeliveryFindParams{Status: st, BeforeReceivedAt: &before, BeforeID: "x"})
			require.Equal(t, "SEARCH deliveries USING INDEX deliveries_dlq_received_idx ((received_at,delivery_id)<(?,?))", got)
			continue
		}
		for cond, p := range map[string]store.DeliveryFindParams{
			"status=?": {Status: st},
			"status=? AND (received_at,delivery_id)<(?,?)": {Status: st, BeforeReceivedAt: &before, BeforeID: "x"},
			"status=? AND received_at>?":                   {Status: st, ReceivedSince: &since},
			"status=?)":                                    {Status: st, Provider: "github"},
		} {
			got := plan(p)
			require.Contains(t, got, "SEARCH deliveries USING INDEX deliveries_host_status_idx (host_id=? AND "+cond, "%+v", p)
			require.Contains(t, got, "USING INDEX sqlite_autoindex_hosts_1 FOR IN-OPERATOR", "%+v", p)
			require.NotContains(t, got, "deliveries_received_idx", "%+v", p)
		}
		got := plan(store.DeliveryFindParams{Status: st, Source: "github"})
		require.Contains(t, got, "SCAN deliveries USING INDEX deliveries_received_idx", st)
		require.NotContains(t, got, "sqlite_autoindex_deliveries_1", st)
	}
}

// The statements of a transition look its deliveries up by key, not
// through the host's deliveries in the statuses it moves from (all of
// them in flight, during a drain).
func TestTransitionsLookUpByKey(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	for _, tr := range []store.Transition{store.TransitionDelivered, store.TransitionAck, store.TransitionNack, store.TransitionExtend} {
		guard, args := transitionable(tr, "h", []string{"a", "b", "c"})
		requireByKeys(t, queryPlan(ctx, t, s, `SELECT `+flow.FailingColumns+` FROM deliveries WHERE `+guard+` ORDER BY delivery_id`, args...),
			"select for %s", tr.Reason)
		requireByKeys(t, queryPlan(ctx, t, s, `INSERT INTO delivery_events (delivery_id, at, from_status, to_status, reason, attempt)
			SELECT delivery_id, ?, status, COALESCE(NULLIF(?, ''), status), ?, attempts FROM deliveries
			WHERE `+guard+` ORDER BY delivery_id`, append([]any{0, string(tr.To), tr.Reason}, args...)...), "audit of %s", tr.Reason)
		requireByKeys(t, queryPlan(ctx, t, s, `UPDATE deliveries SET updated_at = ?, status = COALESCE(NULLIF(?, ''), status)
			WHERE `+guard, append([]any{0, string(tr.To)}, args...)...), "update of %s", tr.Reason)
	}
}

// requireByKeys: the plan finds deliveries among a list of ids (idsIn),
// each by its key, and reads no other row.
func requireByKeys(t *testing.T, plan []string, msg string, args ...any) {
	t.Helper()
	joined := strings.Join(plan, "; ")
	require.Regexp(t, `^SEARCH (deliveries|d) USING INTEGER PRIMARY KEY \(rowid=\?\)`, joined, append([]any{msg}, args...)...)
	require.Contains(t, joined, "SEARCH byid USING COVERING INDEX deliveries_key_idx (<expr>=? AND delivery_id=?)", append([]any{msg}, args...)...)
	require.NotContains(t, joined, "SCAN deliveries", append([]any{msg}, args...)...)
	require.NotContains(t, joined, "SCAN byid", append([]any{msg}, args...)...)
	require.NotContains(t, joined, "SCAN d;", append([]any{msg}, args...)...)
}

// Every statement that finds a delivery by its id names its key (idKey,
// idsIn), led by the received millisecond (migration 16): SQLite reads
// that index, not the table, for each.
func TestLookUpsByIDUseKey(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	const id = "github:x:1764230400000"
	byKey := "SEARCH deliveries USING INDEX deliveries_key_idx (<expr>=? AND delivery_id=?)"
	for name, q := range map[string]struct {
		query string
		args  []any
	}{
		"get":     {`SELECT ` + flow.DeliveryColumns + `, ` + bodyColumn + ` FROM deliveries WHERE ` + ofHost, []any{id, id, "h"}},
		"requeue": {requeueQuery(store.TransitionRevive), append([]any{"queued", 5, 0, id, id}, statusArgs(store.TransitionRevive.From)...)},
		"fail": {failQuery(store.TransitionNack), append([]any{"retrying", nil, nil, "", 0, nil, "", id, id},
			statusArgs(store.TransitionNack.From)...)},
		"result": {recordResult, []any{1, "ok", "", nil, nil, 0, "", 0, id, id, "h"}},
	} {
		plan := strings.Join(queryPlan(ctx, t, s, q.query, q.args...), "; ")
		require.Contains(t, plan, byKey, name)
		require.NotContains(t, plan, "SCAN deliveries", name)
	}
	// A requeue counts the delivery's hand-backs in its own audit trail.
	require.Equal(t, []string{"SEARCH delivery_events USING INDEX delivery_events_received_idx (<expr>=? AND delivery_id=? AND id>?)",
		"SCALAR SUBQUERY 1", "SEARCH delivery_events USING INDEX delivery_events_received_idx (<expr>=? AND delivery_id=?)"},
		queryPlan(ctx, t, s, handBacksSinceRequeue, id, id, "handed back", id, id, "retried", "revived"))
	// A lease finds its candidates again, and their bodies, by rowid.
	require.Equal(t, []string{"SEARCH d USING INTEGER PRIMARY KEY (rowid=?)", "LIST SUBQUERY 1", "SCAN json_each VIRTUAL TABLE INDEX 1:",
		"SEARCH b USING INTEGER PRIMARY KEY (rowid=?)"},
		queryPlan(ctx, t, s, bodiesOf, rowidsArg([]int64{1, 2, 3})))
	// So does a transition, after reading them by id.
	require.Equal(t, []string{"SEARCH deliveries USING INTEGER PRIMARY KEY (rowid=?)", "LIST SUBQUERY 1", "SCAN json_each VIRTUAL TABLE INDEX 1:"},
		queryPlan(ctx, t, s, `SELECT delivery_id FROM deliveries WHERE `+rowidsIn("rowid"), rowidsArg([]int64{1, 2, 3})))
	// Any list of ids, as a transition's without the host.
	requireByKeys(t, queryPlan(ctx, t, s, `SELECT delivery_id FROM deliveries WHERE `+idsIn("rowid"), idsArg([]string{"a", "b"})), "ids")
	for _, status := range store.PrunableStatuses {
		require.Equal(t, []string{"SEARCH deliveries USING INTEGER PRIMARY KEY (rowid=?)", "LIST SUBQUERY 1",
			"SEARCH deliveries USING COVERING INDEX deliveries_" + string(status) + "_idx (updated_at<?)"},
			queryPlan(ctx, t, s, numbered(flow.DeleteQuery(flowDB{}, flow.PruneQuery(flowDB{}, status))), 0, 10), "prune %s", status)
	}
	// The audit trail after an id, with each event's delivery.
	q, args := store.EventsQuery(&store.DeliveryEventListAfterParams{AfterID: 7}, eventsDelivery)
	require.Contains(t, strings.Join(queryPlan(ctx, t, s, q, args...), "; "),
		"SEARCH d USING INDEX deliveries_key_idx (<expr>=? AND delivery_id=?)")
}
