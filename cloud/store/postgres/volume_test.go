package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/storetest"
)

// The volume chart's counts each read an index over their time, for every
// host or one, with 100,000 deliveries stored (a week of them, in every
// status) and analyzed, as autovacuum would.
func TestVolumeUsesIndexes(t *testing.T) {
	ctx := context.Background()
	s, conn, _ := openWithConn(ctx, t)
	now := time.Now().UTC()
	for _, q := range []string{
		`INSERT INTO hosts (id, name, created_at) VALUES ('h0', 'h0', now()), ('h1', 'h1', now()), ('h2', 'h2', now())`,
		`INSERT INTO deliveries (delivery_id, host_id, source, event_id, headers, body_size, status, max_attempts, received_at, updated_at)
		SELECT 'github:e' || i, 'h' || (i % 3), 'github', 'e' || i, '{}', 100,
			CASE WHEN i % 50 = 0 THEN 'dlq' WHEN i % 40 = 0 THEN 'retrying' WHEN i % 100 < 2 THEN 'queued' ELSE 'acked' END,
			5, $1::timestamptz - i * interval '6048 ms', $1::timestamptz - i * interval '6048 ms' + interval '1 s'
		FROM generate_series(0, 99999) i`,
		`INSERT INTO rejections (host_id, source, at, status, reason)
		SELECT 'h' || (i % 3), 'github', $1::timestamptz - i * interval '60480 ms', 401, 'signature' FROM generate_series(0, 9999) i`,
		`ANALYZE`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = append(args, now)
		}
		_, err := conn.Exec(ctx, q, args...)
		require.NoError(t, err)
	}
	from := now.Truncate(time.Hour).Add(-23 * time.Hour)
	for name, r := range map[string]store.VolumeRange{
		"every host":           {Base: from, From: from, To: now},
		"one host":             {Base: from, From: from, To: now, HostID: "h1"},
		"the fold, every host": {Base: now.Truncate(time.Hour), From: now.Truncate(time.Hour), To: now, PerHost: true},
	} {
		q, args := postgres.VolumeQuery(r)
		plan := explain(ctx, t, conn, q, args...)
		require.NotContains(t, plan, "Seq Scan", "%s:\n%s", name, plan)
		require.Equal(t, 5, strings.Count(plan, "Index Cond"), "%s:\n%s", name, plan)
		t.Logf("%s:\n%s", name, plan)
	}
	// The hosts page's and the alerts' backlog: the counts kept, each
	// host's oldest pending a step into its available index, the dead
	// letters of the last hour a range of theirs.
	// A page of hosts' the same, their counts only.
	for name, plan := range map[string]string{
		"every host":      explain(ctx, t, conn, postgres.BacklogQuery, now.Add(-time.Hour), 1000),
		"a page of hosts": explain(ctx, t, conn, postgres.BacklogPageQuery, now.Add(-time.Hour), 1000, []string{"h1", "h2"}),
	} {
		require.NotContains(t, plan, "Seq Scan on deliveries", "%s:\n%s", name, plan)
		require.Regexp(t, `deliveries_dlq_idx on deliveries[^\n]*\n\s+Index Cond: \(updated_at >=`, plan, name)
		require.Regexp(t, `deliveries_available_idx on deliveries[^\n]*\n\s+Index Cond: \(\(host_id = [a-z_]+\.host_id\)`, plan, name)
		require.Contains(t, plan, "delivery_counts", name)
	}
	v, err := s.DeliveryVolume(ctx, &store.DeliveryVolumeParams{Now: now})
	require.NoError(t, err)
	received := 0
	for _, h := range v {
		received += h.Received
	}
	// The hours since the window's start: 23 to 24 of them.
	require.InDelta(t, 100000*23.5/24/7, received, 300, "a day of a week's deliveries")

	// Folded, the same counts, the hours kept read by their keys.
	storetest.FoldVolume(ctx, t, s, now.Add(-2*time.Minute))
	folded, err := s.DeliveryVolume(ctx, &store.DeliveryVolumeParams{Now: now})
	require.NoError(t, err)
	require.Equal(t, v, folded)
	// The hours kept of 1,000 hosts for two days, analyzed: each read
	// finds its rows by a key.
	_, err = conn.Exec(ctx, `
		INSERT INTO delivery_volume (hour, host_id, outcome, n)
		SELECT date_trunc('hour', $1::timestamptz) - h * interval '1 hour', 'k' || k, o, 1
		FROM generate_series(1, 47) h, generate_series(0, 999) k,
			unnest(ARRAY['received', 'acked', 'failed', 'dead-lettered', 'rejected']) o`, now)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `ANALYZE delivery_volume`)
	require.NoError(t, err)
	for name, r := range storetest.KeptVolumeReads() {
		q, args := flow.KeptVolumeQuery(postgres.Dialect, r.Host, r.Hosts, r.Outcome, from, now)
		plan := explain(ctx, t, conn, q, args...)
		require.NotContains(t, plan, "Seq Scan on delivery_volume ", "%s:\n%s", name, plan)
		require.Contains(t, plan, "Index", "%s:\n%s", name, plan)
	}
}
