package postgres_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
)

// The reads an operator runs during an incident each read an index, never
// every delivery kept, on 50,000 deliveries in the proportions of a
// running relay (60 % acked, 2 % dead-lettered, the rest queued, over 50
// hosts), analyzed as autovacuum would; the counts read those kept, not
// the deliveries. Only plans are checked, never times.
func TestIncidentReadsUseIndexes(t *testing.T) {
	ctx := context.Background()
	s, conn, _ := openWithConn(ctx, t)
	fillIncident(ctx, t, conn, 50_000)
	counts, err := s.DeliveryCountByStatus(ctx, "h7")
	require.NoError(t, err)
	require.Equal(t, 600, counts[store.StatusAcked], "the counts kept as the rows went in")
	var correlationID string
	require.NoError(t, conn.QueryRow(ctx, `SELECT correlation_id FROM deliveries WHERE event_id = 'e1234'`).Scan(&correlationID))
	// Some of the queued ones failed once: the failing sources' read
	// has retrying deliveries to find.
	_, err = conn.Exec(ctx, `UPDATE deliveries SET status = 'retrying', attempts = 1 + length(event_id) % 4
		WHERE status = 'queued' AND event_id LIKE '%7'`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `ANALYZE deliveries`)
	require.NoError(t, err)

	for name, plan := range incidentPlans(ctx, t, conn, correlationID) {
		t.Logf("%s:\n%s", name, plan)
		require.NotContains(t, plan, "Seq Scan on deliveries", "%s:\n%s", name, plan)
		if strings.HasPrefix(name, "counts:") {
			require.NotRegexp(t, `on deliveries\b`, plan, "%s: the kept counts, not the deliveries:\n%s", name, plan)
			if strings.HasPrefix(name, "counts: host list") {
				// The page's hosts are read in each part of the sum
				// (the counts folded, the changes since), not after
				// every host's counts were summed.
				sum := subtree(plan, "Append")
				require.Contains(t, sum, "on delivery_counts", "%s:\n%s", name, plan)
				require.Contains(t, sum, "on delivery_count_changes", "%s:\n%s", name, plan)
				require.GreaterOrEqual(t, strings.Count(sum, "CTE Scan on h "), 2, "%s: the page in both parts:\n%s", name, plan)
			}
			continue
		}
		require.Regexp(t, `(Index|Index Only|Bitmap Index) Scan( Backward)? (using|on) deliveries_`, plan, "%s:\n%s", name, plan)
		if lookUp.MatchString(name) {
			require.NotRegexp(t, `deliveries_(host_)?received_idx`, plan, "%s: a look-up, not a walk newest first:\n%s", name, plan)
		}
		if strings.Contains(name, "event id") {
			require.Contains(t, plan, "Index Cond: (event_id = ", "%s: a range of the key that leads with it:\n%s", name, plan)
			require.NotContains(t, plan, "on sources", "%s: not a look-up per source:\n%s", name, plan)
		}
		if name == "failing sources" {
			require.Regexp(t, `Index Only Scan using deliveries_failing_attempts_idx on deliveries\s.*\n\s*Index Cond: \(attempts >= `, plan,
				"the sources past the threshold, a range of the index that leads with the attempts:\n%s", plan)
			// Each one's count from an index of the retrying deliveries by
			// host: on 2 million with 150,000 retrying, unvacuumed or not,
			// deliveries_failing_idx (host and source); on a store this
			// small the planner may walk the smaller by time instead.
			require.Regexp(t, `Index (Only )?Scan using deliveries_(failing|retrying)_idx on deliveries d\s.*\n\s*Index Cond: \(+host_id = `, plan,
				"each one's count from the retrying deliveries' own index:\n%s", plan)
		}
		if name == "dead letter" {
			require.Contains(t, plan, "deliveries_dlq_received_idx", "the dead letters alone, not everyone's deliveries newest first:\n%s", plan)
		}
	}
}

// subtree is the lines of a text plan from the first node named node to
// the end of its children (the lines indented deeper than it).
func subtree(plan, node string) string {
	lines := strings.Split(plan, "\n")
	indent := func(l string) int { return len(l) - len(strings.TrimLeft(l, " ->")) }
	for i, l := range lines {
		if !strings.HasPrefix(strings.TrimLeft(l, " ->"), node) {
			continue
		}
		j := i + 1
		for j < len(lines) && indent(lines[j]) > indent(l) {
			j++
		}
		return strings.Join(lines[i:j], "\n")
	}
	return ""
}

// lookUp names the reads of incidentPlans that look a key up: whether it
// is there or not, they read only the deliveries it names.
var lookUp = regexp.MustCompile(`event id|delivery id|correlation`)

// fillIncident stores n (a multiple of 5,000) deliveries over 50 hosts,
// each with its own GitHub source: 60 % acked, 2 % dead-lettered, the
// rest queued, one a second, the newest now, each with a random-looking
// correlation id; then analyzes them, as autovacuum would. Bulk SQL, not
// the store's inserts: the counts are kept by the triggers all the same.
func fillIncident(ctx context.Context, t testing.TB, conn *pgx.Conn, n int) {
	t.Helper()
	fillIncidentOf(ctx, t, conn, n, `'e' || i`)
}

// fillIncidentOf is fillIncident with the i-th delivery's event id the SQL
// expression event of i: fillIncident's ('e' || i) are short and sort
// together, where a provider's are random.
func fillIncidentOf(ctx context.Context, t testing.TB, conn *pgx.Conn, n int, event string) {
	t.Helper()
	now := time.Now().UTC()
	for _, q := range []string{
		`INSERT INTO hosts (id, name, created_at) SELECT 'h' || i, 'host ' || i, $1::timestamptz + i * interval '1 ms'
		FROM generate_series(0, 49) i`,
		`INSERT INTO sources (host_id, name, provider, enabled, created_at, updated_at)
		SELECT id, 'github', 'github', true, $1::timestamptz, $1::timestamptz FROM hosts`,
		`INSERT INTO deliveries (delivery_id, host_id, source, event_id, headers, body_size, status, max_attempts,
			received_at, updated_at, correlation_id)
		SELECT 'github:' || ` + event + ` || ':' || i, 'h' || (i % 50), 'github', ` + event + `, '{}', 100,
			CASE WHEN i / 50 % 100 < 60 THEN 'acked' WHEN i / 50 % 100 < 62 THEN 'dlq' ELSE 'queued' END, 5,
			$1::timestamptz - ($2 - i) * interval '1 s', $1::timestamptz - ($2 - i) * interval '1 s' + interval '500 ms',
			substr(md5(i::text), 1, 16)
		FROM generate_series(0, $2 - 1) i`,
		`ANALYZE`,
	} {
		var args []any
		if strings.Contains(q, "$2") {
			args = append(args, now, n)
		} else if strings.Contains(q, "$1") {
			args = append(args, now)
		}
		_, err := conn.Exec(ctx, q, args...)
		require.NoError(t, err)
	}
}

// incidentPlans are the plans of the reads an operator runs during an
// incident, by name: "counts:" those of the kept counts.
func incidentPlans(ctx context.Context, t *testing.T, conn *pgx.Conn, correlationID string) map[string]string {
	t.Helper()
	find := func(p store.DeliveryFindParams) string {
		q, args := postgres.FindQuery(&p)
		return explain(ctx, t, conn, q, args...)
	}
	list := func(status store.Status, source string, before *time.Time) string {
		q, args := postgres.ListQuery(&store.DeliveryListParams{HostID: "h7", Status: status, Source: source,
			BeforeReceivedAt: before, BeforeID: "github:e1:1"})
		return explain(ctx, t, conn, q, args...)
	}
	hosts := func(p *store.HostPageParams) string {
		q, args := postgres.HostCountsQuery(p)
		return explain(ctx, t, conn, q, args...)
	}
	before := time.Now().Add(-time.Hour)
	return map[string]string{
		"counts: host list":            hosts(&store.HostPageParams{Limit: 100}),
		"counts: host list, next page": hosts(&store.HostPageParams{Limit: 100, AfterCreatedAt: &before, AfterID: "h9"}),
		"counts: host list, online": hosts(&store.HostPageParams{Limit: 100, Presence: store.PresenceOnline,
			LateCut: before, OfflineCut: before.Add(-2 * time.Minute)}),
		"counts: host page":  explain(ctx, t, conn, postgres.CountByStatusQuery, "h7"),
		"failing sources":    explain(ctx, t, conn, postgres.FailingQuery(3), 1000),
		"host's deliveries":  list("", "", nil),
		"host's next page":   list("", "", &before),
		"host's acked":       list(store.StatusAcked, "", nil),
		"host's queued":      list(store.StatusQueued, "", nil),
		"host's by source":   list("", "github", nil),
		"host's dead letter": list(store.StatusDLQ, "", nil),
		"dead letter":        find(store.DeliveryFindParams{Status: store.StatusDLQ}),
		"queued":             find(store.DeliveryFindParams{Status: store.StatusQueued}),
		"host's found":       find(store.DeliveryFindParams{HostID: "h7", Status: store.StatusDLQ}),
		"delivery id":        find(store.DeliveryFindParams{EventID: "e1234", Source: "github"}),
		"delivery":           explain(ctx, t, conn, postgres.GetQuery, "h34", "github:e1234:1234"),
		"event id":           find(store.DeliveryFindParams{EventID: "e1234"}),
		"absent event id":    find(store.DeliveryFindParams{EventID: "absent"}),
		"correlation id":     find(store.DeliveryFindParams{CorrelationID: correlationID}),
		"absent correlation": find(store.DeliveryFindParams{CorrelationID: "0123456789abcdef"}),
		"host's correlation": find(store.DeliveryFindParams{HostID: "h7", CorrelationID: "0123456789abcdef"}),
		"group's correlation": find(store.DeliveryFindParams{GroupID: "g_1", CorrelationID: "0123456789abcdef",
			Status: store.StatusAcked}),
	}
}
