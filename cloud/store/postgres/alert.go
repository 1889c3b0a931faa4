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

// backlogQuery is BacklogByHost's: one part per partial index (waiting to
// be leased, leased, dead letters of the window since $1), so that acked
// deliveries, nearly all of them, are never read, and the dead letters,
// kept for days, counted from the counts kept. A delivery's updated_at is
// never before its dlq_at, so the window's dead letters are a range of
// their index.
var backlogQuery = `
	SELECT host_id, sum(pending)::bigint, min(oldest), sum(dlq)::bigint, sum(new_dlq)::bigint FROM (
		SELECT host_id, count(*) AS pending, min(received_at) AS oldest, 0::bigint AS dlq, 0::bigint AS new_dlq
		FROM deliveries WHERE status IN ('queued', 'retrying') GROUP BY host_id
		UNION ALL
		SELECT host_id, count(*), min(received_at), 0, 0
		FROM deliveries WHERE status IN ('delivering', 'delivered') GROUP BY host_id
		UNION ALL
		SELECT host_id, 0, NULL, sum(n), 0 FROM ` + flowDB{}.DeliveryCounts() + ` k
		WHERE status = 'dlq' GROUP BY host_id HAVING sum(n) <> 0
		UNION ALL
		SELECT host_id, 0, NULL, 0, count(*)
		FROM deliveries WHERE status = 'dlq' AND updated_at >= $1 AND dlq_at >= $1 GROUP BY host_id) b
	GROUP BY host_id
	ORDER BY min(oldest) NULLS LAST, host_id LIMIT $2`

func (s *Store) BacklogByHost(ctx context.Context, p *store.BacklogParams) ([]*store.HostBacklog, error) {
	bs, err := flow.All(ctx, s.db().Read(), cols.ScanHostBacklog, backlogQuery, ms(p.DLQSince), store.LimitOr(p.Limit, 1000))
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
