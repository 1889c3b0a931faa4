package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
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

// testFill fills st and checks what it wrote; row reads a delivery's row
// as stored.
func testFill(t *testing.T, st store.Store, row func(id string) map[string]any) {
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

	const n = 1500
	f := &fill{st: st, hosts: hosts, mix: mix, ids: gen, end: time.Now(), writers: 32, flushers: 1, takers: 2,
		publicURL: hs.URL, logf: t.Logf}
	res, err := f.run(ctx, n)
	require.NoError(t, err)
	require.Equal(t, n, res.admitted)
	folded, err := st.DeliveryCountFold(ctx, &store.DeliveryCountFoldParams{})
	require.NoError(t, err)
	require.Zero(t, folded, "the counts' changes folded, as the cloud's sweep folds them")

	// The shares, and the kept counts against the rows.
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
	require.Equal(t, res.byFate, kept, "the statuses the loader chose are the statuses stored")
	require.Equal(t, n/100, kept[store.StatusQueued], "the newest 1 %% pending")
	require.InDelta(t, fillShareDLQ*n, kept[store.StatusDLQ], 0.012*n, "dead-lettered")
	require.InDelta(t, fillShareRetrying*n, kept[store.StatusRetrying], 0.012*n, "retrying")
	require.Equal(t, n, kept[store.StatusAcked]+kept[store.StatusDLQ]+kept[store.StatusRetrying]+kept[store.StatusQueued])

	// Each status's audit trail: the transitions that led there.
	trails := map[store.Status][]store.Status{
		store.StatusAcked: {store.StatusQueued, store.StatusDelivering, store.StatusDelivered, store.StatusAcked},

		store.StatusDLQ:      {store.StatusQueued, store.StatusDelivering, store.StatusDelivered, store.StatusDLQ},
		store.StatusRetrying: {store.StatusQueued, store.StatusDelivering, store.StatusDelivered, store.StatusRetrying},
		store.StatusQueued:   {store.StatusQueued},
	}
	var pending *store.Delivery
	for s, want := range trails {
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
