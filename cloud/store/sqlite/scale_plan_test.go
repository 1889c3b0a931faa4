package sqlite

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
)

// The reads an operator runs during an incident each read an index, never
// every delivery kept, on 50,000 deliveries in the proportions of a
// running relay (60 % acked, 2 % dead-lettered, the rest queued, over 50
// hosts): planned without statistics, as a fresh database is, and again
// once PRAGMA optimize has gathered them, as the store does on opening
// (Migrate) and every hour (StatsOptimize). Only plans are checked, never
// times.
func TestIncidentReadsUseIndexes(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cloud.db")
	s, err := Open(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.Migrate(ctx))
	fillIncident(ctx, t, s, 50_000)
	var correlationID string
	require.NoError(t, s.read.QueryRowContext(ctx, `SELECT correlation_id FROM deliveries WHERE rowid = 1234`).Scan(&correlationID))

	requireIndexed := func(s *Store, when string) {
		t.Helper()
		for name, plan := range incidentPlans(ctx, t, s, correlationID) {
			joined := strings.Join(plan, "; ")
			if name == "dead letter" {
				// The dead letters' own index, walked in receipt order
				// until a page is read: the dead letters alone.
				require.Equal(t, []string{"SCAN deliveries USING INDEX deliveries_dlq_received_idx"}, plan, "%s, %s", when, name)
				continue
			}
			for _, step := range plan {
				require.NotRegexp(t, `^SCAN (deliveries|d)\b`, step, "%s, %s: %s", when, name, joined)
			}
			if strings.HasPrefix(name, "counts:") {
				require.NotRegexp(t, `\bdeliveries\b`, joined, "%s, %s: the kept counts, not the deliveries: %s", when, name, joined)
				if strings.HasPrefix(name, "counts: host list") {
					// A page of hosts from their index, then the
					// page's counts by the counts' key, joined to the
					// page by an index built per call of those counts
					// (as many entries as the page has hosts).
					require.Regexp(t, `(SCAN|SEARCH) hosts USING INDEX hosts_created_idx`, joined, "%s, %s", when, name)
					require.Contains(t, joined, "SEARCH delivery_counts USING PRIMARY KEY (host_id=?)", "%s, %s: %s", when, name, joined)
					require.NotRegexp(t, `SCAN delivery_counts\b`, joined, "%s, %s: %s", when, name, joined)
					continue
				}
				// A host's by the counts' key, not through an index of
				// every count built on each call.
				require.NotContains(t, joined, "AUTOMATIC", "%s, %s: %s", when, name, joined)
				continue
			}
			require.Regexp(t, `SEARCH (deliveries|d) USING (COVERING )?INDEX`, joined, "%s, %s", when, name)
			if lookUp.MatchString(name) {
				require.NotRegexp(t, `deliveries_(host_)?received_idx`, joined, "%s, %s: a look-up, not a walk newest first", when, name)
			}
		}
	}
	requireIndexed(s, "without statistics")

	// What Migrate runs on a restart, then readers that load its statistics.
	_, err = s.write.ExecContext(ctx, optimizeOnOpen)
	require.NoError(t, err)
	var analyzed int
	require.NoError(t, s.read.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_stat1 WHERE tbl = 'deliveries'`).Scan(&analyzed))
	require.Positive(t, analyzed, "optimize analyzed deliveries")
	again, err := Open(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, again.Close()) })
	requireIndexed(again, "with statistics")
}

// fillIncident stores n deliveries over 50 hosts, each with its own GitHub
// source: 60 % acked, 2 % dead-lettered, the rest queued; one a second,
// the newest now; each with a random correlation id, as intake makes them.
// Bulk SQL, not the store's inserts: the counts are kept by the triggers
// all the same.
func fillIncident(ctx context.Context, t testing.TB, s *Store, n int) {
	t.Helper()
	now := time.Now()
	_, err := s.write.ExecContext(ctx, `
		WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i < 49)
		INSERT INTO hosts (id, name, created_at) SELECT 'h' || i, 'host ' || i, ?1 + i FROM k`, dbTime(now.Add(-time.Hour)))
	require.NoError(t, err)
	_, err = s.write.ExecContext(ctx, `
		INSERT INTO sources (host_id, name, provider, enabled, created_at, updated_at)
		SELECT id, 'github', 'github', 1, 0, 0 FROM hosts`)
	require.NoError(t, err)
	_, err = s.write.ExecContext(ctx, `
		WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i < ?2 - 1),
		d(i, at, status) AS (SELECT i, ?1 - (?2 - i) * 1000,
			CASE WHEN i / 50 % 100 < 60 THEN 'acked' WHEN i / 50 % 100 < 62 THEN 'dlq' ELSE 'queued' END FROM k)
		INSERT INTO deliveries (delivery_id, host_id, source, event_id, headers, body_size, status, max_attempts,
			received_at, updated_at, acked_at, dlq_at, correlation_id)
		SELECT 'github:e' || i || ':' || at, 'h' || (i % 50), 'github', 'e' || i, '{}', 100, status, 5,
			at, at + 500, iif(status = 'acked', at + 500, NULL), iif(status = 'dlq', at + 500, NULL),
			lower(hex(randomblob(8)))
		FROM d`, dbTime(now), n)
	require.NoError(t, err)
	counts, err := s.DeliveryCountByStatus(ctx, "h7")
	require.NoError(t, err)
	require.Equal(t, n/50*60/100, counts[store.StatusAcked], "the counts kept as the rows went in")
}

// lookUp names the reads of incidentPlans that look a key up: whether it
// is there or not, they read only the deliveries it names.
var lookUp = regexp.MustCompile(`event id|delivery id|correlation`)

// incidentPlans are the plans of the reads an operator runs during an
// incident, by name: "counts:" those of the kept counts.
func incidentPlans(ctx context.Context, t *testing.T, s *Store, correlationID string) map[string][]string {
	t.Helper()
	find := func(p store.DeliveryFindParams) []string {
		q, args := findQuery(&p)
		return queryPlan(ctx, t, s, q, args...)
	}
	list := func(p store.DeliveryListParams) []string {
		q, args := listQuery(&p)
		return queryPlan(ctx, t, s, q, args...)
	}
	hosts := func(p *store.HostPageParams) []string {
		q, args := flow.HostCountsQuery(flowDB{}, hostColumns, p)
		return queryPlan(ctx, t, s, numbered(q), args...)
	}
	const id = "github:e1234:1764230400000"
	before := time.Now().Add(-time.Hour)
	return map[string][]string{
		"counts: host list":            hosts(&store.HostPageParams{Limit: 100}),
		"counts: host list, next page": hosts(&store.HostPageParams{Limit: 100, AfterCreatedAt: &before, AfterID: "h9"}),
		"counts: host list, online": hosts(&store.HostPageParams{Limit: 100, Presence: store.PresenceOnline,
			LateCut: before, OfflineCut: before.Add(-2 * time.Minute)}),
		"counts: host page":  queryPlan(ctx, t, s, numbered(flow.CountByStatusQuery(flowDB{})), "h7"),
		"host's deliveries":  list(store.DeliveryListParams{HostID: "h7"}),
		"host's next page":   list(store.DeliveryListParams{HostID: "h7", BeforeReceivedAt: &before, BeforeID: id}),
		"host's acked":       list(store.DeliveryListParams{HostID: "h7", Status: store.StatusAcked}),
		"host's queued":      list(store.DeliveryListParams{HostID: "h7", Status: store.StatusQueued}),
		"host's by source":   list(store.DeliveryListParams{HostID: "h7", Source: "github"}),
		"host's dead letter": list(store.DeliveryListParams{HostID: "h7", Status: store.StatusDLQ}),
		"dead letter":        find(store.DeliveryFindParams{Status: store.StatusDLQ}),
		"queued":             find(store.DeliveryFindParams{Status: store.StatusQueued}),
		"host's found":       find(store.DeliveryFindParams{HostID: "h7", Status: store.StatusDLQ}),
		"delivery id":        find(store.DeliveryFindParams{EventID: "e1234", Source: "github"}),
		"delivery":           queryPlan(ctx, t, s, `SELECT `+flow.DeliveryColumns+`, `+bodyColumn+` FROM deliveries WHERE `+ofHost, id, id, "h34"),
		"event id":           find(store.DeliveryFindParams{EventID: "e1234"}),
		"absent event id":    find(store.DeliveryFindParams{EventID: "absent"}),
		"correlation id":     find(store.DeliveryFindParams{CorrelationID: correlationID}),
		"absent correlation": find(store.DeliveryFindParams{CorrelationID: "0123456789abcdef"}),
		"host's correlation": find(store.DeliveryFindParams{HostID: "h7", CorrelationID: "0123456789abcdef"}),
		"group's correlation": find(store.DeliveryFindParams{GroupID: "g_1", CorrelationID: "0123456789abcdef",
			Status: store.StatusAcked}),
	}
}
