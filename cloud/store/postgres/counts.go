package postgres

import (
	"context"
	"fmt"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
)

// foldCounts moves at most $1 of the recorded changes to the counts of
// deliveries (migration 20) into delivery_counts, each host's and
// status's added up first, in one statement: a read that sums both sees
// each change once, before or after. Changes another fold holds are
// skipped, and the counts' rows are written in key order, so two
// replicas' folds neither count a change twice nor deadlock.
const foldCounts = `
	WITH moved AS (
		DELETE FROM delivery_count_changes WHERE ctid IN (
			SELECT ctid FROM delivery_count_changes LIMIT $1 FOR UPDATE SKIP LOCKED)
		RETURNING host_id, status, n),
	folded AS (
		INSERT INTO delivery_counts (host_id, status, n)
		SELECT host_id, status, sum(n) FROM moved GROUP BY host_id, status ORDER BY host_id, status
		ON CONFLICT (host_id, status) DO UPDATE SET n = delivery_counts.n + excluded.n)
	SELECT count(*) FROM moved`

// DeliveryCountFold folds recorded changes into the counts, and forgets
// the counts of hosts that are gone (their deliveries' deletions folded).
func (s *Store) DeliveryCountFold(ctx context.Context, p *store.DeliveryCountFoldParams) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, foldCounts, store.LimitOr(p.Limit, flow.DefaultBatch)).Scan(&n); err != nil {
		return 0, fmt.Errorf("delivery count fold: %w", err)
	}
	if n == 0 {
		return 0, nil
	}
	_, err := s.pool.Exec(ctx, `DELETE FROM delivery_counts c
		WHERE n = 0 AND NOT EXISTS (SELECT 1 FROM hosts h WHERE h.id = c.host_id)`)
	if err != nil {
		return 0, fmt.Errorf("delivery count fold: %w", err)
	}
	return n, nil
}

// StatsOptimize does nothing: autovacuum analyzes the tables as they
// change.
func (s *Store) StatsOptimize(context.Context) error { return nil }
