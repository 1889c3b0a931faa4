package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/auth"
	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/server"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
	"github.com/relaykit/relay/cloud/store/sqlite"
	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
	"github.com/relaykit/relay/scripts/internal/rig"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx", to read the rows as stored
)

// The loader writes what the cloud writes: on both engines, a small fill
// leaves the shares of statuses it promises, the kept counts agree with
// the rows, each status has the audit trail its transitions write, and a
// delivery it left pending is, column by column, the row the cloud's own
// HTTP intake stores for the same kind of webhook (but for what is each
// webhook's own: ids, times, the trace).
func TestFillWritesWhatIntakeWrites(t *testing.T) {
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			var st store.Store
			var db *sql.DB
			var err error
			byID := `SELECT * FROM deliveries WHERE delivery_id = $1`
			switch engine {
			case "sqlite":
				path := t.TempDir() + "/cloud.db"
				st = sqlitetest.OpenAt(t, path)
				db, err = sql.Open("sqlite", "file:"+path+"?mode=ro")
				byID = `SELECT * FROM deliveries WHERE delivery_id = ?`
			case "postgres":
				url := pgtest.NewDatabase(t)
				s, oerr := postgres.Open(context.Background(), url)
				require.NoError(t, oerr)
				t.Cleanup(func() { s.Close() })
				st = s
				db, err = sql.Open("pgx", url)
			}
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			testFill(t, st, func(id string) map[string]any { return rowOf(t, db, byID, id) })
		})
	}
}

// fillRig is a loader for st, with the cloud's HTTP server on the same
// store: its hosts and sources made through the admin API, as the bench
// makes them.
type fillRig struct {
	f     *fill
	hs    *httptest.Server
	mix   *payloadMix
	gen   *ids
	hosts []string
}

func newFillRig(t *testing.T, st store.Store) *fillRig {
	ctx := context.Background()
	// The cloud's HTTP server on the same store: hosts and sources are
	// made through its admin API, as the bench makes them.
	ring, err := secrets.NewRing(bytes.Repeat([]byte{7}, 32))
	require.NoError(t, err)
	tokens, err := auth.NewTokens(bytes.Repeat([]byte{9}, 32), 0, clockwork.NewRealClock())
	require.NoError(t, err)
	const token = "fill-test-admin-token-of-at-least-32-characters"
	srv := server.New(st, ring, tokens, clockwork.NewRealClock(), slog.New(slog.NewTextHandler(io.Discard, nil)),
		server.Config{AdminToken: token, RateLimitPerMin: 1_000_000})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	admin := rig.NewAdmin(hs.URL, token)

	mix, err := newMix("mix")
	require.NoError(t, err)
	gen, err := newIDs("random")
	require.NoError(t, err)
	b := &bench{mix: mix, ids: gen}
	hosts := make([]string, 10)
	for i := range hosts {
		hosts[i], _, err = b.createHost(ctx, admin, fmt.Sprintf("fill-%d", i))
		require.NoError(t, err)
	}

	f := &fill{st: st, hosts: hosts, mix: mix, ids: gen, end: time.Now(), writers: 32, flushers: 1, takers: 2,
		publicURL: hs.URL, logf: t.Logf}
	return &fillRig{f: f, hs: hs, mix: mix, gen: gen, hosts: hosts}
}

// shareTolerance is how far from share·n a status's count of n may be
// when each of draws deliveries took it with probability share (fateOf:
// by a hash of a random event id) and copies multiplied the draws to n:
// four standard deviations of that binomial count, scaled by n/draws.
func shareTolerance(n, draws int, share float64) float64 {
	return 4 * math.Sqrt(float64(draws)*share*(1-share)) * float64(n) / float64(draws)
}

// testFill fills st and checks what it wrote; row reads a delivery's row
// as stored.
func testFill(t *testing.T, st store.Store, row func(id string) map[string]any) {
	ctx := context.Background()
	fr := newFillRig(t, st)
	mix, gen, hs := fr.mix, fr.gen, fr.hs
	const n = 3000 // two rounds
	res, err := fr.f.run(ctx, n)
	require.NoError(t, err)
	require.Equal(t, n, res.admitted)
	pending := checkFill(t, st, fr.hosts, n, n, res.byFate)

	// The first round's deliveries were taken at the end of their
	// window (an hour of a day's round; here a round is half the week),
	// the last round's at its end.
	acked, err := st.DeliveryFind(ctx, &store.DeliveryFindParams{Status: store.StatusAcked, Limit: n})
	require.NoError(t, err)
	window := fillSpan / 2 / fillWindows
	asReceived := 0
	for _, d := range acked {
		if d.UpdatedAt.UnixMilli() == res.lastTaken.Add(reportedAfter).UnixMilli() {
			continue
		}
		took := d.UpdatedAt.Sub(d.ReceivedAt)
		require.True(t, took >= takenAfter+reportedAfter && took <= window+takenAfter+reportedAfter,
			"delivery %s acked %s after its receipt: neither in its window nor at the last round's end", d.ID, took)
		asReceived++
	}
	require.InDelta(t, len(acked)/2, asReceived, float64(len(acked))/20, "the first round's acked in their windows")

	// The same kind of webhook through the cloud's HTTP intake, to the
	// pending delivery's host: the same row but for its own values.
	k := kindNamed(t, mix, pending)
	w := k.build(gen.next(k.provider, 0), time.Now())
	s := newSender(hs.URL, pending.HostID, 1, mix, gen, 0)
	defer s.close()
	require.Equal(t, okAnswer, s.post(ctx, w, false))
	viaHTTP, err := st.DeliveryFind(ctx, &store.DeliveryFindParams{EventID: w.id, Limit: 2})
	require.NoError(t, err)
	require.Len(t, viaHTTP, 1)
	loaded, stored := row(pending.ID), row(viaHTTP[0].ID)
	own := []string{"id", "delivery_id", "event_id", "received_at", "updated_at", "correlation_id", "body_id"}
	if k.provider == "stripe" {
		// The event's id is in a Stripe body: the digest of a body (kept
		// for a replay-guarded source) is each webhook's own.
		require.Equal(t, stored["body_sha256"] == nil, loaded["body_sha256"] == nil, "body_sha256 kept")
		own = append(own, "body_sha256")
	}
	for _, c := range own {
		delete(loaded, c)
		delete(stored, c)
	}
	loadedHeaders, storedHeaders := pending.Headers, viaHTTP[0].Headers
	delete(loaded, "headers")
	delete(stored, "headers")
	require.Equal(t, stored, loaded, "a pending delivery's columns, loaded and through HTTP")
	require.Equal(t, keysOf(storedHeaders), keysOf(loadedHeaders), "the headers kept")
	for h, v := range storedHeaders {
		switch h {
		case "traceparent", "x-github-delivery", "stripe-signature":
		default:
			require.Equal(t, v, loadedHeaders[h], "header %s", h)
		}
	}
	require.Len(t, pending.CorrelationID, len(viaHTTP[0].CorrelationID), "a correlation id of intake's making")
	loadedTrail, err := st.DeliveryEventList(ctx, pending.ID)
	require.NoError(t, err)
	storedTrail, err := st.DeliveryEventList(ctx, viaHTTP[0].ID)
	require.NoError(t, err)
	require.Equal(t, storedTrail[0].Reason, loadedTrail[0].Reason)
}

// fillTrails is the audit trail the loader leaves a delivery of each
// status: the transitions that led there.
var fillTrails = map[store.Status][]store.Status{
	store.StatusAcked:    {store.StatusQueued, store.StatusDelivering, store.StatusDelivered, store.StatusAcked},
	store.StatusDLQ:      {store.StatusQueued, store.StatusDelivering, store.StatusDelivered, store.StatusDLQ},
	store.StatusRetrying: {store.StatusQueued, store.StatusDelivering, store.StatusDelivered, store.StatusRetrying},
	store.StatusQueued:   {store.StatusQueued},
}

// checkFill checks a fill of n deliveries of st over hosts: the kept
// counts against the rows, the shares of statuses (byFate, as the loader
// chose them for draws deliveries: n, or the base that copies multiply)
// and each status's audit trail; it returns a pending one.
func checkFill(t *testing.T, st store.Store, hosts []string, n, draws int, byFate map[store.Status]int) *store.Delivery {
	t.Helper()
	ctx := context.Background()
	kept := map[store.Status]int{}
	for _, h := range hosts {
		counts, err := st.DeliveryCountByStatus(ctx, h)
		require.NoError(t, err)
		for s, c := range counts {
			kept[s] += c
			ds, err := st.DeliveryList(ctx, &store.DeliveryListParams{HostID: h, Status: s, Limit: n})
			require.NoError(t, err)
			require.Len(t, ds, c, "host %s, %s: the kept count and the rows", h, s)
		}
	}
	for s, c := range kept {
		if c == 0 {
			delete(kept, s)
		}
	}
	require.Equal(t, byFate, kept, "the statuses the loader chose are the statuses stored")
	require.Equal(t, n/100, kept[store.StatusQueued], "the newest 1 %% pending")
	require.InDelta(t, fillShareDLQ*float64(n), kept[store.StatusDLQ], shareTolerance(n, draws, fillShareDLQ), "dead-lettered")
	require.InDelta(t, fillShareRetrying*float64(n), kept[store.StatusRetrying], shareTolerance(n, draws, fillShareRetrying), "retrying")
	require.Equal(t, n, kept[store.StatusAcked]+kept[store.StatusDLQ]+kept[store.StatusRetrying]+kept[store.StatusQueued])

	// Each status's audit trail: the transitions that led there.
	var pending *store.Delivery
	for s, want := range fillTrails {
		ds, err := st.DeliveryFind(ctx, &store.DeliveryFindParams{Status: s, Limit: 1})
		require.NoError(t, err)
		require.Len(t, ds, 1, s)
		evs, err := st.DeliveryEventList(ctx, ds[0].ID)
		require.NoError(t, err)
		var got []store.Status
		for _, e := range evs {
			got = append(got, e.To)
		}
		require.Equal(t, want, got, "the audit trail of a delivery %s", s)
		if s == store.StatusQueued {
			pending = ds[0]
		}
	}
	return pending
}

// Copies of the loader's deliveries (-scale-base) are the loader's rows
// but for what is each webhook's own: every row, body and trail is
// checked against the rules a webhook's own values follow — its delivery
// id made of its event id and time, the event id where the row carries it
// (header, Stripe body and its digest), a correlation id of its time,
// a trace of its own, an audit trail of its status's transitions from its
// receipt on — and the kept counts and shares as the loader's fill.
func TestCopiesWriteWhatTheLoaderWrites(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	st, err := postgres.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	fr := newFillRig(t, st)

	const base, n = 500, 2000
	chunk, workers := copyChunk, copyWorkers
	// Ten statements, one at a time: the layout checked below is each
	// statement's order and the chunks'. Two at once lie in order only up
	// to the chunks in flight, and on a loaded machine one can stall while
	// the other writes the rest (a correlation of 0.66 seen once).
	copyChunk, copyWorkers = 50, 1
	t.Cleanup(func() { copyChunk, copyWorkers = chunk, workers })
	res, err := fr.f.run(ctx, base)
	require.NoError(t, err)
	_, err = db.Exec(`CREATE TABLE originals AS SELECT delivery_id FROM deliveries`) // the loader's
	require.NoError(t, err)
	_, err = fr.f.copyFill(ctx, url, base, n+1)
	require.ErrorContains(t, err, "does not divide", "a size not a multiple of the base")
	copied, err := fr.f.copyFill(ctx, url, base, n)
	require.NoError(t, err)
	require.Equal(t, n-base, copied)
	for s, c := range res.byFate {
		res.byFate[s] = c * n / base
	}
	checkFill(t, st, fr.hosts, n, base, res.byFate)

	one := func(q string, args ...any) int64 {
		t.Helper()
		var v int64
		require.NoError(t, db.QueryRow(q, args...).Scan(&v), q)
		return v
	}
	// Each is a count of the rows that break a rule.
	for rule, q := range map[string]string{
		"a delivery id of its source, event id and time": `SELECT count(*) FROM deliveries
			WHERE delivery_id <> source || ':' || event_id || ':' || (extract(epoch FROM received_at) * 1000)::bigint`,
		"an event id of its provider's shape": `SELECT count(*) FROM deliveries WHERE NOT CASE source
			WHEN 'stripe' THEN event_id ~ '^evt_[0-9A-Za-z]{24}$'
			ELSE event_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' END`,
		"GitHub's delivery header its event id": `SELECT count(*) FROM deliveries
			WHERE source = 'github' AND headers->>'x-github-delivery' IS DISTINCT FROM event_id`,
		"a Stripe body with its event id": `SELECT count(*) FROM deliveries d JOIN delivery_bodies b USING (delivery_id)
			WHERE d.source = 'stripe' AND position('"' || d.event_id || '"' IN convert_from(b.raw_body, 'UTF8')) = 0`,
		"a body of its size, and its digest its body's where one is kept": `SELECT count(*) FROM deliveries d JOIN delivery_bodies b USING (delivery_id)
			WHERE length(b.raw_body) <> d.body_size OR d.body_sha256 <> sha256(b.raw_body)`,
		"a correlation id of its time": `SELECT count(*) FROM deliveries WHERE correlation_id !~ '^[0-9a-f]{28}$'
			OR left(correlation_id, 12) <> lpad(to_hex((extract(epoch FROM received_at) * 1000)::bigint), 12, '0')`,
		"a trail of its status's transitions from its receipt": `SELECT count(*) FROM (
			SELECT d.status, d.received_at, string_agg(e.to_status, ',' ORDER BY e.id) AS trail, min(e.at) AS first
			FROM deliveries d JOIN delivery_events e USING (delivery_id) GROUP BY d.delivery_id, d.status, d.received_at) x
			WHERE first <> received_at OR trail <> CASE status WHEN 'queued' THEN 'queued'
				ELSE 'queued,delivering,delivered,' || status END`,
		"its times in the week": `SELECT count(*) FROM deliveries WHERE received_at > $1
			OR received_at <= $1::timestamptz - interval '7 days' OR updated_at < received_at`,
	} {
		args := []any{}
		if rule == "its times in the week" {
			args = append(args, fr.f.end)
		}
		require.Zero(t, one(q, args...), rule)
	}
	require.EqualValues(t, n, one(`SELECT count(*) FROM deliveries`))
	require.EqualValues(t, n, one(`SELECT count(*) FROM delivery_bodies`))
	require.EqualValues(t, n, one(`SELECT count(DISTINCT correlation_id) FROM deliveries`), "correlation ids")
	require.EqualValues(t, n, one(`SELECT count(DISTINCT headers->>'traceparent') FROM deliveries`), "traces")
	require.EqualValues(t, n, one(`SELECT count(DISTINCT received_at) FROM deliveries`), "receipts")
	// The copies fall between the loader's deliveries: no gap between two
	// receipts is much over the week's share of one.
	gap := one(`SELECT (extract(epoch FROM max(g)) * 1000)::bigint FROM (
		SELECT received_at - lag(received_at) OVER (ORDER BY received_at) AS g FROM deliveries) x`)
	require.Less(t, gap, 2*fillSpan.Milliseconds()/n, "the largest gap between receipts, ms")
	// The copies lie in each table in the order of their deliveries'
	// receipts, as intake leaves rows, so that retention's oldest are on
	// few pages: a row's place against its delivery's receipt correlates
	// (0.96–0.97 here; 0.005–0.045 with the originals copied in the order
	// of their ids).
	for _, table := range []string{"deliveries", "delivery_bodies", "delivery_events"} {
		var order float64
		require.NoError(t, db.QueryRow(`SELECT corr(pos, extract(epoch FROM d.received_at)) FROM (
			SELECT row_number() OVER (ORDER BY ctid) AS pos, * FROM `+table+`) x JOIN deliveries d USING (delivery_id)
			WHERE delivery_id NOT IN (SELECT delivery_id FROM originals)`).Scan(&order))
		require.Greater(t, order, 0.8, "the copies in %s: the correlation of their place and their receipt", table)
	}
	for _, h := range fr.hosts[:2] {
		ds, err := st.DeliveryList(ctx, &store.DeliveryListParams{HostID: h, Limit: 1})
		require.NoError(t, err)
		found, err := st.DeliveryFind(ctx, &store.DeliveryFindParams{EventID: ds[0].EventID, Limit: 2})
		require.NoError(t, err)
		require.Len(t, found, 1, "the event id of %s", ds[0].ID)
	}
}

// kindNamed is the kind of the mix the pending delivery d is of.
func kindNamed(t *testing.T, mix *payloadMix, d *store.Delivery) *kind {
	t.Helper()
	for _, k := range mix.kinds {
		if k.provider == d.Source && len(k.body) == d.BodySize && (k.provider == "stripe" || k.event == d.EventType) {
			return k
		}
	}
	for _, k := range mix.kinds { // a Stripe body's size is its template's, less its id's and plus the new one's
		if k.provider == d.Source && k.event == d.EventType {
			return k
		}
	}
	t.Fatalf("no kind of the mix for %s %s", d.Source, d.EventType)
	return nil
}

// rowOf reads the deliveries row of id as stored, each column by name.
func rowOf(t *testing.T, db *sql.DB, q, id string) map[string]any {
	t.Helper()
	rows, err := db.Query(q, id)
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	require.True(t, rows.Next(), "delivery %s", id)
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	require.NoError(t, rows.Scan(ptrs...))
	out := make(map[string]any, len(cols))
	for i, c := range cols {
		out[c] = vals[i]
	}
	return out
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

var _ = sqlite.Open // the "sqlite" driver of database/sql, registered by the store's package

// TestSettleVacuumsAndCheckpoints: after a Postgres fill the scale
// scenario vacuums the database and checkpoints the server before it
// measures anything.
func TestSettleVacuumsAndCheckpoints(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	st, err := postgres.Open(ctx, url)
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx))
	require.NoError(t, st.Close())
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })

	var before time.Time
	require.NoError(t, db.QueryRow(`SELECT now()`).Scan(&before))
	require.NoError(t, settle(ctx, url))

	// The server's last checkpoint began after settle was called (another
	// test's CHECKPOINT on the shared server could pass this too; none of
	// the project's tests issues one).
	var checkpoint time.Time
	require.NoError(t, db.QueryRow(`SELECT checkpoint_time FROM pg_control_checkpoint()`).Scan(&checkpoint))
	require.False(t, checkpoint.Before(before.Truncate(time.Second)), "last checkpoint %s, settle began %s", checkpoint, before)
	// This database's tables were vacuumed and analyzed by it (the
	// statistics are this database's own, reported as its connection ends).
	require.Eventually(t, func() bool {
		var vacuumed, analyzed sql.NullTime
		if err := db.QueryRow(`SELECT last_vacuum, last_analyze FROM pg_stat_user_tables WHERE relname = 'deliveries'`).Scan(&vacuumed, &analyzed); err != nil {
			return false
		}
		return vacuumed.Valid && !vacuumed.Time.Before(before) && analyzed.Valid && !analyzed.Time.Before(before)
	}, 10*time.Second, 20*time.Millisecond, "deliveries vacuumed and analyzed by settle")
}
