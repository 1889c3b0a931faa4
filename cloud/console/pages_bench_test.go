package console

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/auth"
	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/server"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
	"github.com/relaykit/relay/cloud/store/sqlite/sqlitetest"
	"github.com/relaykit/relay/cloud/store/storetest"
)

// nextRE finds a list's link to its next page.
var nextRE = regexp.MustCompile(`<a href="([^"]+)" rel="next">`)

// benchDeliveries is how many deliveries BenchmarkPages stores.
const benchDeliveries = 100_000

// BenchmarkPages renders each console page through the handler with
// 100,000 deliveries stored (a week of them over three hosts and two
// sources each, with their audit trails: 96 % acked, 3 % dead-lettered,
// the last ones pending, leased, delivered or retrying) and 2,000
// rejections, on both engines. Seeding takes a while; run with
// -benchtime Nx and -count 1.
func BenchmarkPages(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) {
		st := sqlitetest.Open(b)
		benchPages(b, st, func() {}) // SQLite keeps no statistics unless asked (the cloud never asks)
	})
	b.Run("postgres", func(b *testing.B) {
		url := pgtest.NewDatabase(b)
		st, err := postgres.Open(context.Background(), url)
		require.NoError(b, err)
		b.Cleanup(func() { st.Close() })
		benchPages(b, st, func() { vacuumAnalyze(b, url) })
	})
}

func benchPages(b *testing.B, st store.Store, settle func()) {
	end := time.Date(2026, 11, 26, 12, 30, 0, 0, time.UTC)
	app, h := benchConsole(b, st, end)

	hosts, sample := seedPages(b, st, app, end)
	settle()
	// The volume kept up to two minutes ago, as the cloud's sweep keeps it.
	storetest.FoldVolume(context.Background(), b, st, end.Add(-2*time.Minute))

	get := loggedIn(b, h)
	first := get("/console/deliveries")
	require.Equal(b, 200, first.Code)
	next := nextRE.FindStringSubmatch(first.Body.String())
	require.NotNil(b, next, "a next page")

	pages := []struct{ name, path string }{
		{"hosts", "/console/"},
		{"deliveries", "/console/deliveries"},
		{"deliveries-page2", strings.ReplaceAll(next[1], "&amp;", "&")},
		{"deliveries-host", "/console/deliveries?host=" + hosts[1]},
		{"deliveries-dlq", "/console/deliveries?status=dlq"},
		{"deliveries-retrying", "/console/deliveries?status=retrying"},
		{"deliveries-leased", "/console/deliveries?status=delivering"},
		// Fewer than a page match: the whole host's receipt order is read.
		{"deliveries-leased-host", "/console/deliveries?status=delivering&host=" + hosts[0]},
		{"deliveries-provider", "/console/deliveries?provider=stripe"},
		{"deliveries-event", "/console/deliveries?event_id=" + sample.EventID},
		{"deliveries-since", "/console/deliveries?since=2026-11-25T00:00&until=2026-11-25T12:00"},
		{"delivery", deliveryHref(sample.HostID, sample.ID)},
		{"dlq-purge-confirm", "/console/hosts/" + hosts[0] + "/dlq/purge"},
		{"volume", "/console/volume"},
		{"volume-host", "/console/volume?host=" + hosts[2]},
		{"rejections", "/console/rejections?host=" + hosts[0]},
	}
	for _, p := range pages {
		rec := get(p.path)
		require.Equal(b, 200, rec.Code, "%s: %s", p.name, rec.Body.String())
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				if rec := get(p.path); rec.Code != 200 {
					b.Fatalf("%s: %d", p.path, rec.Code)
				}
			}
			// CPU time is steadier than wall time on a loaded machine; it
			// leaves out the Postgres server's own.
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// benchConsole is the cloud's API and console on st, on a clock stopped
// at end.
func benchConsole(b *testing.B, st store.Store, end time.Time) (*server.Server, http.Handler) {
	clock := clockwork.NewFakeClockAt(end)
	ring, err := secrets.NewRing(bytes.Repeat([]byte{7}, 32))
	require.NoError(b, err)
	tokens, err := auth.NewTokens([]byte("jwt-key-for-tests-32-bytes-long!"), 0, clock)
	require.NoError(b, err)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	app := server.New(st, ring, tokens, clock, log, server.Config{AdminToken: testAdmin})
	con := New(Deps{App: app, Store: st, Clock: clock, Log: log, CSRFKey: tokens.DerivedKey("console csrf"),
		Volume: ReceivedPerHour(st)})
	app.Mount(Path+"/", con.Routes, con.NotFound)
	return app, app.Handler()
}

// BenchmarkHostsPage renders the console's hosts page over 1,000 hosts,
// each with four deliveries received in the last day (two acked, one
// queued, one leased or dead-lettered): what the page costs a host.
//
//	go test -run '^$' -bench HostsPage -benchtime 100x ./cloud/console/
func BenchmarkHostsPage(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) { benchHostsPage(b, sqlitetest.Open(b), func() {}) })
	b.Run("postgres", func(b *testing.B) {
		url := pgtest.NewDatabase(b)
		st, err := postgres.Open(context.Background(), url)
		require.NoError(b, err)
		b.Cleanup(func() { st.Close() })
		benchHostsPage(b, st, func() { vacuumAnalyze(b, url) })
	})
}

func benchHostsPage(b *testing.B, st store.Store, settle func()) {
	ctx := context.Background()
	end := time.Date(2026, 11, 26, 12, 30, 0, 0, time.UTC)
	app, h := benchConsole(b, st, end)
	storetest.HostsOfFour(ctx, b, st, 1000, end, func(name string) (string, error) {
		h, err := app.CreateHost(ctx, name)
		if err != nil {
			return "", err
		}
		return h.ID, nil
	})
	// What the cloud's sweep keeps up: the volume up to two minutes ago,
	// the counts' changes folded.
	storetest.FoldVolume(ctx, b, st, end.Add(-2*time.Minute))
	for {
		n, err := st.DeliveryCountFold(ctx, &store.DeliveryCountFoldParams{})
		require.NoError(b, err)
		if n == 0 {
			break
		}
	}
	settle()
	get := loggedIn(b, h)
	rec := get("/console/")
	require.Equal(b, 200, rec.Code, rec.Body.String())
	b.SetBytes(int64(rec.Body.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if rec := get("/console/"); rec.Code != 200 {
			b.Fatalf("%d", rec.Code)
		}
	}
}

// loggedIn logs in to the console of h once and returns a getter that
// asks for a page with the session's cookie.
func loggedIn(b *testing.B, h http.Handler) func(path string) *httptest.ResponseRecorder {
	// Log in once; every page is asked with the session's cookie.
	req := httptest.NewRequest("POST", "/console/login", strings.NewReader(url.Values{"token": {testAdmin}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(b, 303, rec.Code, rec.Body.String())
	var cookie *http.Cookie
	for _, ck := range rec.Result().Cookies() {
		if ck.Name == CookieName {
			cookie = ck
		}
	}
	require.NotNil(b, cookie)
	get := func(path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", path, nil)
		req.AddCookie(cookie)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	return get
}

// vacuumAnalyze does what autovacuum does after a bulk load: statistics
// for the planner, a visibility map for index-only scans.
func vacuumAnalyze(b *testing.B, url string) {
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(b, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(context.Background(), "VACUUM ANALYZE")
	require.NoError(b, err)
}

// processCPU is the user and system time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// seedPages stores benchDeliveries deliveries as BenchmarkPages describes,
// received up to end, and returns the hosts' ids and one dead letter.
func seedPages(b *testing.B, st store.Store, app *server.Server, end time.Time) ([]string, *store.Delivery) {
	ctx := context.Background()
	var hosts []string
	for i := range 3 {
		res, err := app.CreateHost(ctx, fmt.Sprintf("host %d", i))
		require.NoError(b, err)
		hosts = append(hosts, res.ID)
		for _, src := range []struct{ name, provider string }{{"github", "github"}, {"stripe", "stripe"}} {
			_, err := st.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: res.ID, Name: src.name, Provider: src.provider, Enabled: true, Now: end.Add(-8 * 24 * time.Hour)})
			require.NoError(b, err)
		}
	}
	body := []byte(`{"action":"opened","number":1347,"pull_request":{"title":"` + strings.Repeat("x", 700) + `","user":{"login":"octocat"}},"repository":{"full_name":"octo/hello"}}`)
	headers := map[string]string{"Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/abc", "X-Github-Event": "pull_request",
		"X-Github-Delivery": "72d3162e", "X-Hub-Signature-256": "sha256=…", "Traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	const chunk = 1000
	span := 7 * 24 * time.Hour
	var sample *store.Delivery
	for c := 0; c < benchDeliveries/chunk; c++ {
		last := c == benchDeliveries/chunk-1
		ps := make([]*store.DeliveryInsertParams, 0, chunk)
		for i := range chunk {
			n := c*chunk + i
			at := end.Add(-span + time.Duration(n)*(span/benchDeliveries))
			src := []string{"github", "stripe"}[n%2]
			ev := fmt.Sprintf("evt-%07d", n)
			ps = append(ps, &store.DeliveryInsertParams{ID: store.DeliveryID(src, ev, at), HostID: hosts[n%3], Source: src, EventID: ev,
				EventType: "pull_request", EventAction: "opened", Headers: headers, RawBody: body, CorrelationID: fmt.Sprintf("%016x", n), ReceivedAt: at})
		}
		_, err := st.DeliveryInsertBatch(ctx, ps)
		require.NoError(b, err)
		now := ps[len(ps)-1].ReceivedAt.Add(time.Second)
		for _, h := range hosts {
			max := chunk
			if last {
				max = chunk / 3 * 7 / 10 // the newest 30 % stay pending
			}
			leased, err := st.DeliveryLease(ctx, &store.DeliveryLeaseParams{HostID: h, Max: max, LeaseFor: time.Minute, Now: now})
			require.NoError(b, err)
			var ids, acks []string
			var nacks []delivery.Nack
			for i, d := range leased.Deliveries {
				switch {
				case last && i%7 == 0: // leased, its answer not yet written
				case last && i%7 == 1: // delivered, not yet acked
					ids = append(ids, d.ID)
				case last && i%7 == 2: // failed, retrying
					ids = append(ids, d.ID)
					nacks = append(nacks, delivery.Nack{ID: d.ID, Error: "exit status 1", Retryable: true})
				case i%33 == 0: // dead-lettered
					ids = append(ids, d.ID)
					nacks = append(nacks, delivery.Nack{ID: d.ID, Error: "exit status 2: bad payload", Retryable: false})
				default:
					ids = append(ids, d.ID)
					acks = append(acks, d.ID)
				}
			}
			_, err = st.DeliveryMarkDelivered(ctx, &store.DeliveryMarkDeliveredParams{HostID: h, IDs: ids, Now: now})
			require.NoError(b, err)
			_, err = st.DeliveryAck(ctx, &store.DeliveryAckParams{HostID: h, IDs: acks, Now: now.Add(time.Second)})
			require.NoError(b, err)
			_, err = st.DeliveryNack(ctx, delivery.NackParams(h, nacks, delivery.DefaultRetryPolicy, now.Add(time.Second)))
			require.NoError(b, err)
			if sample == nil && len(nacks) > 0 {
				sample, err = st.DeliveryGet(ctx, h, nacks[0].ID)
				require.NoError(b, err)
			}
		}
	}
	for i := range 2000 {
		require.NoError(b, st.RejectionInsert(ctx, &store.Rejection{HostID: hosts[i%3], Source: "github", At: end.Add(-time.Duration(i) * time.Minute),
			Status: 401, Reason: "signature: no secret matches the signature", ClientIP: "192.0.2.9", HeaderNames: []string{"content-type", "x-hub-signature-256"}}))
	}
	return hosts, sample
}
