package postgres

import (
	"context"
	"fmt"
	"strconv"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
)

// The rest of store.AlertStore is flow.Alerts, which Store embeds: these
// queries are Postgres's own.
var _ store.AlertStore = (*Store)(nil)

// backlogQuery is BacklogByHost's. What a host has pending and dead-
// lettered comes from the counts kept (a host offline for a day has a day
// of webhooks queued, and the alerts read the backlog every 15 s); the
// oldest pending of a host with any is the first of its available index
// (queued and retrying) and of its leased ones (a lease's worth at most),
// each looked up only when the counts say the host has some: most hosts
// have nothing leased, and a look-up in the (host_id, status) index, which
// holds every delivery kept, reads pages of its own. The window's dead
// letters since $1 are a range of their index (a delivery's updated_at is
// never before its dlq_at).
var backlogQuery, backlogOfHosts = backlogOf(false), backlogOf(true)

// backlogOf is BacklogByHost's query, of the hosts in $3 (a list bound by
// flowDB.Strings) only when hosts.
func backlogOf(hosts bool) string {
	of := ""
	if hosts {
		// The hosts' counts only; the window's dead letters stay a
		// range of their index (by host, it walked every dead letter
		// of each host), and the join keeps the hosts' alone.
		of = flowDB{}.IsOneOf("host_id", "$3")
	}
	return `
	WITH k AS (
		SELECT host_id,
			coalesce(sum(n) FILTER (WHERE status IN ('queued', 'retrying')), 0) AS available,
			coalesce(sum(n) FILTER (WHERE status IN ('delivering', 'delivered')), 0) AS leased,
			sum(n) FILTER (WHERE status = 'dlq') AS dlq
		FROM ` + flowDB{}.DeliveryCounts(of) + ` GROUP BY host_id),
	fresh AS (
		SELECT host_id, count(*) AS n FROM deliveries
		WHERE status = 'dlq' AND updated_at >= $1 AND dlq_at >= $1 GROUP BY host_id),
	b AS MATERIALIZED (
		SELECT k.host_id, k.available + k.leased AS pending,
			least(
				CASE WHEN k.available > 0 THEN
					(SELECT min(received_at) FROM deliveries d WHERE d.host_id = k.host_id AND d.status IN ('queued', 'retrying')) END,
				CASE WHEN k.leased > 0 THEN
					(SELECT min(received_at) FROM deliveries d WHERE d.host_id = k.host_id AND d.status IN ('delivering', 'delivered')) END) AS oldest,
			coalesce(k.dlq, 0) AS dlq, coalesce(f.n, 0) AS new_dlq
		FROM k LEFT JOIN fresh f ON f.host_id = k.host_id)
	SELECT host_id, pending::bigint, oldest, dlq::bigint, new_dlq::bigint FROM b
	WHERE pending > 0 OR dlq > 0 OR new_dlq > 0
	ORDER BY oldest NULLS LAST, host_id LIMIT $2`
}

func (s *Store) BacklogByHost(ctx context.Context, p *store.BacklogParams) ([]*store.HostBacklog, error) {
	q, args := backlogQuery, []any{ms(p.DLQSince), store.LimitOr(p.Limit, 1000)}
	if p.HostIDs != nil {
		q, args = backlogOfHosts, append(args, flowDB{}.Strings(p.HostIDs))
	}
	bs, err := flow.All(ctx, s.db().Read(), cols.ScanHostBacklog, q, args...)
	if err != nil {
		return nil, fmt.Errorf("backlog by host: %w", err)
	}
	return bs, nil
}

// failingQuery finds the sources with a retrying delivery of at least
// minAttempts attempts in the range of the partial index of those that
// failed more than once, led by their attempts
// (deliveries_failing_attempts_idx), then reads each one's retrying
// deliveries in the index that leads with the host and source
// (deliveries_failing_idx) for its count and most attempts: the retrying
// deliveries that failed once, most of them, are read only for a failing
// source's count. The threshold is written out, not bound, so that the
// planner can prove the partial index holds what the range asks for (a
// generic plan of a bound one never uses it); below 2 attempts every
// retrying delivery is read, as before. An index of every retrying
// delivery led by the attempts was tried: the planner counted each source
// by walking it whole. Grouping every retrying delivery took 41 ms at
// 150,000 of them (2 million kept), this 0.6 ms.
func failingQuery(minAttempts int) string {
	return `
	SELECT f.host_id, f.source, c.most, c.n FROM
		(SELECT DISTINCT host_id, source FROM deliveries
			WHERE status = 'retrying' AND attempts >= ` + strconv.Itoa(max(minAttempts, 1)) + `) f,
		LATERAL (SELECT max(d.attempts) AS most, count(*) AS n FROM deliveries d
			WHERE d.status = 'retrying' AND d.host_id = f.host_id AND d.source = f.source) c
	ORDER BY c.most DESC, f.host_id, f.source LIMIT $1`
}

func (s *Store) FailingSources(ctx context.Context, p *store.FailingSourcesParams) ([]*store.SourceFailures, error) {
	fs, err := flow.All(ctx, s.db().Read(), flow.ScanSourceFailures, failingQuery(p.MinAttempts), store.LimitOr(p.Limit, 1000))
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
