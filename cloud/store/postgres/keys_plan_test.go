package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
	"github.com/relaykit/relay/cloud/store/postgres"
)

// A delivery, its body and its audit trail are found by id through the
// indexes led by the id's received millisecond (migration 27): no primary
// key on the id is left, so a condition on the id alone would read every
// row; the trail of every delivery (GET /api/events) is read by the
// events' ids (migration 28); a retention batch is deleted by the rows'
// addresses (RowKey), and its bodies and trails by their keys (the
// delete's trigger). Checked on 50,000 deliveries, each with a body and
// two events, analyzed.
func TestDeliveryIDsReadTheKeyIndexes(t *testing.T) {
	ctx := context.Background()
	_, conn, _ := openWithConn(ctx, t)
	fillIncident(ctx, t, conn, 50_000)
	fillTrails(ctx, t, conn)
	var id string
	require.NoError(t, conn.QueryRow(ctx, `SELECT delivery_id FROM deliveries WHERE event_id = 'e1234'`).Scan(&id))
	ids := []string{id, "github:e1235:1235"}
	trail := func(p store.DeliveryEventListAfterParams) string {
		q, args := postgres.EventsAfter(&p)
		return explain(ctx, t, conn, q, args...)
	}
	statuses := []string{"queued", "retrying"}
	lease := explain(ctx, t, conn, postgres.LeaseStatement, ids, "delivering", time.Now(), time.Now(), statuses, "lease", statuses)
	prune := flow.DeleteQuery(postgres.Dialect, postgres.PruneQuery(store.StatusAcked))
	for name, c := range map[string]struct {
		plan    string
		indexes []string
	}{
		"a delivery with its body": {explain(ctx, t, conn, postgres.GetQuery, "h34", id),
			[]string{"using deliveries_key_idx", "using delivery_bodies_key_idx"}},
		"its audit trail": {explain(ctx, t, conn, postgres.EventListQuery, id), []string{"using delivery_events_key_idx"}},
		"its last result": {explain(ctx, t, conn, postgres.ResultGetQuery, id), []string{"using deliveries_key_idx"}},
		"a lock by ids":   {explain(ctx, t, conn, postgres.LockTransitionable, "h34", ids, statuses), []string{"using deliveries_key_idx"}},
		"a lease of ids":  {lease, []string{"using deliveries_key_idx", "using delivery_bodies_key_idx"}},
		"every delivery's trail, after an id": {trail(store.DeliveryEventListAfterParams{AfterID: 90_000, Limit: 500}),
			[]string{"using delivery_events_id_idx", "using deliveries_key_idx"}},
		"every delivery's trail, the newest": {trail(store.DeliveryEventListAfterParams{Newest: true, Limit: 10}),
			[]string{"using delivery_events_id_idx", "using deliveries_key_idx"}},
		"a retention batch": {explain(ctx, t, conn, prune, time.Now(), 1000),
			[]string{"using deliveries_acked_idx", "Tid Scan on deliveries"}},
	} {
		t.Logf("%s:\n%s", name, c.plan)
		require.NotContains(t, c.plan, "Seq Scan", "%s:\n%s", name, c.plan)
		for _, index := range c.indexes {
			require.Contains(t, c.plan, index, "%s:\n%s", name, c.plan)
		}
	}

	// A join by the key's two conditions is estimated at one row: what a
	// lease changed is not joined to its ids a second time (each changed
	// row compared with every id).
	require.Equal(t, 1, strings.Count(lease, "Function Scan"), lease)

	tag, err := conn.Exec(ctx, prune, time.Now(), 1000)
	require.NoError(t, err)
	require.EqualValues(t, 1000, tag.RowsAffected())
	var deliveries, bodies, events int
	require.NoError(t, conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM deliveries), (SELECT count(*) FROM delivery_bodies),
		(SELECT count(*) FROM delivery_events)`).Scan(&deliveries, &bodies, &events))
	require.Equal(t, []int{49_000, 49_000, 98_000}, []int{deliveries, bodies, events}, "a batch goes with its bodies and trails")
}

// fillTrails gives each stored delivery a small body and two audit events
// (received, then its status), as fillIncident's bulk SQL leaves them
// without; then analyzes them.
func fillTrails(ctx context.Context, t testing.TB, conn *pgx.Conn) {
	t.Helper()
	for _, q := range []string{
		`INSERT INTO delivery_bodies (delivery_id, raw_body) SELECT delivery_id, '\x7b7d' FROM deliveries`,
		`INSERT INTO delivery_events (delivery_id, at, to_status, reason, attempt)
			SELECT delivery_id, received_at, 'queued', 'received', 0 FROM deliveries`,
		`INSERT INTO delivery_events (delivery_id, at, from_status, to_status, reason, attempt)
			SELECT delivery_id, updated_at, 'queued', status, 'moved', 1 FROM deliveries`,
		`ANALYZE`,
	} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err)
	}
}
