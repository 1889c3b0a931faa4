package sqlite

import (
	"context"
	"fmt"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
)

// The rest of store.AlertStore is flow.Alerts, which Store embeds: these
// queries are SQLite's own, tuned to its planner.
var _ store.AlertStore = (*Store)(nil)

// backlogQuery is BacklogByHost's: one part per partial index (waiting to
// be leased, leased, dead letters of the window), so that acked
// deliveries, nearly all of them, are never read, and the dead letters
// counted from the counts kept: they are kept for days, and the alerts
// read the backlog every 15 s. A delivery's updated_at is never before
// its dlq_at, so the window's dead letters are a range of their index.
// Grouping by +host_id keeps the planner from walking the (host_id,
// status) index, every delivery of it, for its order.
const backlogQuery = `
	SELECT host_id, SUM(pending), MIN(oldest), SUM(dlq), SUM(new_dlq) FROM (
		SELECT host_id, COUNT(*) AS pending, MIN(received_at) AS oldest, 0 AS dlq, 0 AS new_dlq
		FROM deliveries WHERE status IN ('queued', 'retrying') GROUP BY +host_id
		UNION ALL
		SELECT host_id, COUNT(*), MIN(received_at), 0, 0
		FROM deliveries WHERE status IN ('delivering', 'delivered') GROUP BY +host_id
		UNION ALL
		SELECT host_id, 0, NULL, n, 0 FROM delivery_counts WHERE status = 'dlq' AND n <> 0
		UNION ALL
		SELECT host_id, 0, NULL, 0, COUNT(*)
		FROM deliveries WHERE status = 'dlq' AND updated_at >= ?1 AND dlq_at >= ?1 GROUP BY +host_id)
	GROUP BY host_id
	ORDER BY MIN(oldest) IS NULL, MIN(oldest), host_id LIMIT ?2`

func (s *Store) BacklogByHost(ctx context.Context, p *store.BacklogParams) ([]*store.HostBacklog, error) {
	bs, err := queryAll(ctx, s.read, cols.ScanHostBacklog, backlogQuery, dbTime(p.DLQSince), store.LimitOr(p.Limit, 1000))
	if err != nil {
		return nil, fmt.Errorf("backlog by host: %w", err)
	}
	return bs, nil
}

// failingQuery reads the partial index of retrying deliveries alone.
// Grouped by plain host_id and source, the planner walked the dedupe key's
// index instead, for its order: every delivery ever kept, at each
// evaluation (every 15 s).
const failingQuery = `
	SELECT host_id, source, MAX(attempts), COUNT(*) FROM deliveries WHERE status = 'retrying'
	GROUP BY +host_id, +source HAVING MAX(attempts) >= ?
	ORDER BY MAX(attempts) DESC, host_id, source LIMIT ?`

func (s *Store) FailingSources(ctx context.Context, p *store.FailingSourcesParams) ([]*store.SourceFailures, error) {
	fs, err := queryAll(ctx, s.read, flow.ScanSourceFailures, failingQuery, max(p.MinAttempts, 1), store.LimitOr(p.Limit, 1000))
	if err != nil {
		return nil, fmt.Errorf("failing sources: %w", err)
	}
	return fs, nil
}

// alertListQuery lists alerts before an id, newest first; firing, only
// those not resolved. Alerts are kept once resolved, so the firing list
// (the evaluator's, every 15 s) reads the partial index of firing alerts
// and sorts those few: the condition is written out, not bound, so that
// the index's applies, and the unary + on id keeps the planner from
// walking every alert ever raised, newest first, for the order. That walk
// took 16-19 ms at 100,000 resolved alerts; the index, 0.1 ms.
func alertListQuery(firing bool) string {
	if firing {
		return `SELECT ` + flow.AlertColumns + ` FROM alerts
			WHERE resolved_at IS NULL AND +id < ? ORDER BY +id DESC LIMIT ?`
	}
	return `SELECT ` + flow.AlertColumns + ` FROM alerts WHERE id < ? ORDER BY id DESC LIMIT ?`
}

func (s *Store) AlertList(ctx context.Context, p *store.AlertListParams) ([]*store.Alert, error) {
	before := p.BeforeID
	if before <= 0 {
		before = 1<<63 - 1
	}
	as, err := queryAll(ctx, s.read, cols.ScanAlert, alertListQuery(p.Firing), before, store.LimitOr(p.Limit, 100))
	if err != nil {
		return nil, fmt.Errorf("alert list: %w", err)
	}
	return as, nil
}
