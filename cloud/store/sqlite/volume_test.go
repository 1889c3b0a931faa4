package sqlite

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
)

// The volume chart's counts each read an index over their time (the
// deliveries' counts the index alone), for every host or one, with 10,000 deliveries stored (a week of them, in every
// status) and no statistics gathered, as a fresh database has none. Without statistics SQLite's plan does not depend
// on the row count, so 10,000 rows show what 100,000 would (and take a tenth of the time under -race).
func TestVolumeUsesIndexes(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	now := time.Now()
	_, err := s.write.ExecContext(ctx, `INSERT INTO hosts (id, name, created_at) VALUES ('h0', 'h0', 0), ('h1', 'h1', 0), ('h2', 'h2', 0)`)
	require.NoError(t, err)
	_, err = s.write.ExecContext(ctx, `
		WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 9999)
		INSERT INTO deliveries (delivery_id, host_id, source, event_id, headers, body_size, status, max_attempts, received_at, updated_at)
		SELECT 'github:e' || i, 'h' || (i % 3), 'github', 'e' || i, '{}', 100,
			CASE WHEN i % 50 = 0 THEN 'dlq' WHEN i % 40 = 0 THEN 'retrying' WHEN i % 100 < 2 THEN 'queued' ELSE 'acked' END,
			5, ?1 - i * 60480, ?1 - i * 60480 + 1000
		FROM n`, dbTime(now))
	require.NoError(t, err)
	_, err = s.write.ExecContext(ctx, `
		WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 999)
		INSERT INTO rejections (host_id, source, at, status, reason) SELECT 'h' || (i % 3), 'github', ?1 - i * 604800, 401, 'signature' FROM n`, dbTime(now))
	require.NoError(t, err)

	for _, host := range []string{"", "h1"} {
		q, args, err := volumeQuery(&store.DeliveryVolumeParams{HostID: host, Now: now})
		require.NoError(t, err)
		plan := queryPlan(ctx, t, s, q, args...)
		searches := 0
		for _, step := range plan {
			// (SCAN g: the grouped hours, at most 24 rows.)
			require.False(t, strings.HasPrefix(step, "SCAN deliveries") || strings.HasPrefix(step, "SCAN rejections"),
				"host %q: %s", host, strings.Join(plan, "; "))
			if strings.HasPrefix(step, "SEARCH") {
				require.Contains(t, step, "INDEX", "host %q", host)
				if strings.HasPrefix(step, "SEARCH deliveries") {
					require.Contains(t, step, "COVERING INDEX", "host %q: the index alone", host)
				}
				searches++
			}
		}
		require.Equal(t, 5, searches, "host %q: %s", host, strings.Join(plan, "; "))
	}
	v, err := s.DeliveryVolume(ctx, &store.DeliveryVolumeParams{Now: now})
	require.NoError(t, err)
	received := 0
	for _, h := range v {
		received += h.Received
	}
	// The hours since the window's start: 23 to 24 of them.
	require.InDelta(t, 10000*23.5/24/7, received, 30, "a day of a week's deliveries")
}

// The hosts page's backlog reads the partial indexes of the deliveries
// not acked, never the (host_id, status) index of them all.
func TestBacklogUsesPartialIndexes(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	plan := strings.Join(queryPlan(ctx, t, s, backlogQuery, 0, 10), "; ")
	for _, idx := range []string{"deliveries_available_idx", "deliveries_lease_idx"} {
		require.Contains(t, plan, "SCAN deliveries USING INDEX "+idx, plan)
	}
	// Dead letters, and those of the last hour, from their index alone
	// (migration 18).
	require.Contains(t, plan, "SCAN deliveries USING COVERING INDEX deliveries_dlq_idx", plan)
	require.NotContains(t, plan, "deliveries_host_status_idx", plan)
}
