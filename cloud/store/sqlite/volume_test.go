package sqlite

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
	"github.com/relaykit/relay/cloud/store/storetest"
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

	from := now.UTC().Truncate(time.Hour).Add(-23 * time.Hour)
	for name, r := range map[string]store.VolumeRange{
		"every host":           {Base: from, From: from, To: now},
		"one host":             {Base: from, From: from, To: now, HostID: "h1"},
		"the fold, every host": {Base: now.Truncate(time.Hour), From: now.Truncate(time.Hour), To: now, PerHost: true},
	} {
		q, args := volumeQuery(r)
		plan := queryPlan(ctx, t, s, q, args...)
		searches := 0
		for _, step := range plan {
			// (SCAN g: the grouped hours, at most 24 rows a host.)
			require.False(t, strings.HasPrefix(step, "SCAN deliveries") || strings.HasPrefix(step, "SCAN rejections"),
				"%s: %s", name, strings.Join(plan, "; "))
			if strings.HasPrefix(step, "SEARCH") {
				require.Contains(t, step, "INDEX", name)
				// Each host's receipts are found by time, their host read
				// from the row: a minute of them, in the fold.
				if strings.HasPrefix(step, "SEARCH deliveries") && !(r.PerHost && strings.Contains(step, "received_idx")) {
					require.Contains(t, step, "COVERING INDEX", "%s: the index alone", name)
				}
				searches++
			}
		}
		require.Equal(t, 5, searches, "%s: %s", name, strings.Join(plan, "; "))
	}
	v, err := s.DeliveryVolume(ctx, &store.DeliveryVolumeParams{Now: now})
	require.NoError(t, err)
	received := 0
	for _, h := range v {
		received += h.Received
	}
	// The hours since the window's start: 23 to 24 of them.
	require.InDelta(t, 10000*23.5/24/7, received, 30, "a day of a week's deliveries")

	// Folded, the same counts; the hours kept of 1,000 hosts for two days
	// each read by a key.
	storetest.FoldVolume(ctx, t, s, now.Add(-2*time.Minute))
	folded, err := s.DeliveryVolume(ctx, &store.DeliveryVolumeParams{Now: now})
	require.NoError(t, err)
	require.Equal(t, v, folded)
	_, err = s.write.ExecContext(ctx, `
		WITH RECURSIVE h(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM h WHERE i < 47),
			k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i < 999),
			o(name) AS (VALUES ('received'), ('acked'), ('failed'), ('dead-lettered'), ('rejected'))
		INSERT INTO delivery_volume (hour, host_id, outcome, n)
		SELECT ?1 / 3600000 * 3600000 - h.i * 3600000, 'k' || k.i, o.name, 1 FROM h, k, o`, dbTime(now))
	require.NoError(t, err)
	for name, r := range storetest.KeptVolumeReads() {
		q, args := flow.KeptVolumeQuery(flowDB{}, r.Host, r.Hosts, r.Outcome, dbTime(from), dbTime(now))
		plan := strings.Join(queryPlan(ctx, t, s, q, args...), "; ")
		require.NotContains(t, plan, "SCAN delivery_volume", "%s: %s", name, plan)
		require.Contains(t, plan, "SEARCH delivery_volume", "%s: %s", name, plan)
	}
}

// The hosts page's and the alerts' backlog reads the counts kept, a step
// into an index for each host's oldest pending, and a range of the dead
// letters' index: never the deliveries pending or dead-lettered, however
// many a host has.
func TestBacklogUsesPartialIndexes(t *testing.T) {
	ctx := context.Background()
	s := migrated(ctx, t)
	for _, tc := range []struct {
		name string
		plan []string
	}{
		{"every host", queryPlan(ctx, t, s, backlogQuery, 0, 10)},
		{"a page of hosts", queryPlan(ctx, t, s, backlogOfHosts, 0, 10, flowDB{}.Strings([]string{"h1", "h2"}))},
	} {
		plan := strings.Join(tc.plan, "; ")
		if tc.name == "every host" {
			require.Contains(t, plan, "SCAN delivery_counts", plan)
		} else {
			require.Contains(t, plan, "SEARCH delivery_counts USING PRIMARY KEY (host_id=?)", "%s: %s", tc.name, plan)
		}
		require.Contains(t, plan, "SEARCH deliveries USING INDEX deliveries_available_idx (host_id=?)", "%s: %s", tc.name, plan)
		require.Contains(t, plan, "SEARCH deliveries USING COVERING INDEX deliveries_host_status_idx (host_id=? AND status=?)", "%s: %s", tc.name, plan)
		require.Contains(t, plan, "SEARCH deliveries USING COVERING INDEX deliveries_dlq_idx (updated_at>?)", "%s: the window's dead letters, not every host's: %s", tc.name, plan)
		require.NotContains(t, plan, "SCAN deliveries", "%s: %s", tc.name, plan)
		require.Equal(t, 3, strings.Count(plan, "CORRELATED SCALAR SUBQUERY"), "%s: each host's oldest, once: %s", tc.name, plan)
	}
}
