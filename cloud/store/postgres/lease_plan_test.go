package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store/postgres"
)

// A lease reads the host's first available deliveries in the available
// index's order, whatever the estimates. The bench's drain of 100,000 was
// planned from statistics taken before its backlog was queued: a bitmap
// scan of the whole backlog and an on-disk sort, 140 ms a lease, for every
// lease (a drain quadratic in its backlog). Those estimates cannot be made
// up at will here, so the test prices the ordered index scan out instead
// (enable_indexscan off) and checks that the lease's settings still choose
// it over a bitmap or a sort.
func TestLeaseCandidatesReadTheAvailableIndexInOrder(t *testing.T) {
	ctx := context.Background()
	_, conn, _ := openWithConn(ctx, t)
	insert := `INSERT INTO deliveries (delivery_id, host_id, source, event_id, headers, body_size, status, max_attempts, received_at, updated_at)
		SELECT 'github:' || $1 || i, $1, 'github', $1 || i, '{}', 100, $2, 5, now() + (i * 7919 % 100003) * interval '1 ms', now()
		FROM generate_series($3::int, $4::int) i`
	for _, step := range []struct {
		q    string
		args []any
	}{
		{`ALTER TABLE deliveries SET (autovacuum_enabled = false)`, nil},
		{`INSERT INTO hosts (id, name, created_at) VALUES ('h1', 'h1', now()), ('h2', 'h2', now())`, nil},
		{insert, []any{"h1", "queued", 1, 8}},
		{insert, []any{"h2", "acked", 1, 5000}},
		{`ANALYZE deliveries`, nil},
		{insert, []any{"h1", "queued", 9, 30000}},
	} {
		_, err := conn.Exec(ctx, step.q, step.args...)
		require.NoError(t, err)
	}
	candidates := func(settings string) string {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx)
		if settings != "" {
			_, err = tx.Exec(ctx, settings)
			require.NoError(t, err)
		}
		return explain(ctx, t, tx, postgres.CandidatesQuery, "h1", time.Now(), 501)
	}
	t.Logf("planned with the statistics alone:\n%s", candidates(""))
	const skewed = `SET LOCAL enable_indexscan = off; `
	bad := candidates(skewed)
	require.Contains(t, bad, "Sort", "the skewed estimates plan the sort:\n%s", bad)
	plan := candidates(skewed + postgres.CandidatesPlan)
	require.Contains(t, plan, "Index Scan using deliveries_available_idx", plan)
	require.NotContains(t, plan, "Sort", plan)
	require.NotContains(t, plan, "Bitmap", plan)
}
