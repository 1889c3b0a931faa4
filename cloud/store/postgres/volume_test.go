package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
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
	for _, host := range []string{"", "h1"} {
		q, args, err := postgres.VolumeQuery(&store.DeliveryVolumeParams{HostID: host, Now: now})
		require.NoError(t, err)
		plan := explain(ctx, t, conn, q, args...)
		require.NotContains(t, plan, "Seq Scan", "host %q:\n%s", host, plan)
		require.Equal(t, 5, strings.Count(plan, "Index Cond"), "host %q:\n%s", host, plan)
		t.Logf("host %q:\n%s", host, plan)
	}
	v, err := s.DeliveryVolume(ctx, &store.DeliveryVolumeParams{Now: now})
	require.NoError(t, err)
	received := 0
	for _, h := range v {
		received += h.Received
	}
	// The hours since the window's start: 23 to 24 of them.
	require.InDelta(t, 100000*23.5/24/7, received, 300, "a day of a week's deliveries")
}
