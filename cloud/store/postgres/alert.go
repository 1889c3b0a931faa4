package postgres

import (
	"context"
	"fmt"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
)

// The rest of store.AlertStore is flow.Alerts, which Store embeds: these
// queries are Postgres's own.
var _ store.AlertStore = (*Store)(nil)

func (s *Store) BacklogByHost(ctx context.Context, p *store.BacklogParams) ([]*store.HostBacklog, error) {
	// One part per partial index (waiting to be leased, leased, dead
	// letters): acked deliveries, nearly all of them, are never read.
	bs, err := flow.All(ctx, s.db().Read(), cols.ScanHostBacklog, `
		SELECT host_id, sum(pending)::bigint, min(oldest), sum(dlq)::bigint, sum(new_dlq)::bigint FROM (
			SELECT host_id, count(*) AS pending, min(received_at) AS oldest, 0::bigint AS dlq, 0::bigint AS new_dlq
			FROM deliveries WHERE status IN ('queued', 'retrying') GROUP BY host_id
			UNION ALL
			SELECT host_id, count(*), min(received_at), 0, 0
			FROM deliveries WHERE status IN ('delivering', 'delivered') GROUP BY host_id
			UNION ALL
			SELECT host_id, 0, NULL, count(*), count(*) FILTER (WHERE dlq_at >= $1)
			FROM deliveries WHERE status = 'dlq' GROUP BY host_id) b
		GROUP BY host_id
		ORDER BY min(oldest) NULLS LAST, host_id LIMIT $2`,
		ms(p.DLQSince), store.LimitOr(p.Limit, 1000))
	if err != nil {
		return nil, fmt.Errorf("backlog by host: %w", err)
	}
	return bs, nil
}

func (s *Store) FailingSources(ctx context.Context, p *store.FailingSourcesParams) ([]*store.SourceFailures, error) {
	fs, err := flow.All(ctx, s.db().Read(), flow.ScanSourceFailures, `
		SELECT host_id, source, max(attempts), count(*) FROM deliveries WHERE status = 'retrying'
		GROUP BY host_id, source HAVING max(attempts) >= $1
		ORDER BY max(attempts) DESC, host_id, source LIMIT $2`, max(p.MinAttempts, 1), store.LimitOr(p.Limit, 1000))
	if err != nil {
		return nil, fmt.Errorf("failing sources: %w", err)
	}
	return fs, nil
}

func (s *Store) AlertList(ctx context.Context, p *store.AlertListParams) ([]*store.Alert, error) {
	before := p.BeforeID
	if before <= 0 {
		before = 1<<63 - 1
	}
	as, err := flow.All(ctx, s.db().Read(), cols.ScanAlert, `SELECT `+flow.AlertColumns+` FROM alerts
		WHERE (NOT $1 OR resolved_at IS NULL) AND id < $2 ORDER BY id DESC LIMIT $3`,
		p.Firing, before, store.LimitOr(p.Limit, 100))
	if err != nil {
		return nil, fmt.Errorf("alert list: %w", err)
	}
	return as, nil
}
