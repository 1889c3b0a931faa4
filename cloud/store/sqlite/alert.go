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

// backlogQuery is BacklogByHost's. What a host has pending and dead-
// lettered comes from the counts kept (a host offline for a day has a
// day of webhooks queued, and the alerts read the backlog every 15 s);
// the oldest pending of a host with any is the first of each status in
// an index that leads with the host and orders by receipt (available:
// queued and retrying; the host's status: leased), one step into each
// of the statuses the counts say it has: a step into the (host_id,
// status) index, which holds every delivery kept, reads pages of its own
// (15 µs a host at 300,000 kept, where the small available index's was
// 3), and most hosts have nothing leased. The window's dead letters are
// a range of their index (a delivery's updated_at is never before its
// dlq_at). Grouping by +host_id keeps the planner from walking the
// (host_id, status) index, every delivery of it, for its order.
var backlogQuery, backlogOfHosts = backlogOf(false), backlogOf(true)

// backlogOf is BacklogByHost's query, of the hosts in ?3 (a list bound by
// flowDB.Strings) only when hosts.
func backlogOf(hosts bool) string {
	of := ""
	if hosts {
		// The hosts' counts only; the window's dead letters stay a
		// range of their index (by host, it walked every dead letter
		// of each host), and the join keeps the hosts' alone.
		of = "WHERE " + flowDB{}.IsOneOf("host_id", "?3")
	}
	return `
	WITH k AS (
		SELECT host_id,
			SUM(CASE WHEN status IN ('queued', 'retrying') THEN n ELSE 0 END) AS available,
			SUM(CASE WHEN status = 'delivering' THEN n ELSE 0 END) AS delivering,
			SUM(CASE WHEN status = 'delivered' THEN n ELSE 0 END) AS delivered,
			SUM(CASE WHEN status = 'dlq' THEN n ELSE 0 END) AS dlq
		FROM delivery_counts ` + of + ` GROUP BY host_id),
	fresh AS (
		SELECT host_id, COUNT(*) AS n FROM deliveries
		WHERE status = 'dlq' AND updated_at >= ?1 AND dlq_at >= ?1 GROUP BY +host_id),
	b AS MATERIALIZED (
		SELECT k.host_id, k.available + k.delivering + k.delivered AS pending,
			NULLIF(min(` +
		firstIf("available", "deliveries_available_idx", "status IN ('queued', 'retrying')") + `, ` +
		firstIf("delivering", "deliveries_host_status_idx", "status = 'delivering'") + `, ` +
		firstIf("delivered", "deliveries_host_status_idx", "status = 'delivered'") + `), ` + noTime + `) AS oldest,
			k.dlq, coalesce(f.n, 0) AS new_dlq
		FROM k LEFT JOIN fresh f ON f.host_id = k.host_id)
	SELECT host_id, pending, oldest, dlq, new_dlq FROM b
	WHERE pending > 0 OR dlq > 0 OR new_dlq > 0
	ORDER BY oldest IS NULL, oldest, host_id LIMIT ?2`
}

// firstIf is the receipt of the host's (k's) first delivery of where in
// index, looked up only when its count of them (a column of k) is not
// zero; noTime when it has none.
func firstIf(count, index, where string) string {
	return `CASE WHEN k.` + count + ` > 0 THEN coalesce((SELECT received_at FROM deliveries INDEXED BY ` + index + `
					WHERE host_id = k.host_id AND ` + where + ` ORDER BY received_at LIMIT 1), ` + noTime + `) ELSE ` + noTime + ` END`
}

// noTime stands for no time in a min() of times (SQLite's scalar min is
// NULL when any argument is).
const noTime = "9223372036854775807"

func (s *Store) BacklogByHost(ctx context.Context, p *store.BacklogParams) ([]*store.HostBacklog, error) {
	q, args := backlogQuery, []any{dbTime(p.DLQSince), store.LimitOr(p.Limit, 1000)}
	if p.HostIDs != nil {
		q, args = backlogOfHosts, append(args, flowDB{}.Strings(p.HostIDs))
	}
	bs, err := queryAll(ctx, s.read, cols.ScanHostBacklog, q, args...)
	if err != nil {
		return nil, fmt.Errorf("backlog by host: %w", err)
	}
	return bs, nil
}

// failingQuery finds the sources with a retrying delivery of at least ?1
// attempts in the range of their partial index that leads with the
// attempts (deliveries_failing_attempts_idx), then reads each one's
// retrying deliveries in the one that leads with the host and source
// (deliveries_failing_idx), once for its count and most attempts: the
// retrying deliveries that failed fewer times, most of them, are read
// only for a failing source's count. Both covering, the table not read.
// Grouping every retrying delivery took 1 ms at 6,000 of them (300,000
// kept), 0.06 ms this way, and grew with them.
const failingQuery = `
	WITH f AS (SELECT DISTINCT host_id, source FROM deliveries INDEXED BY deliveries_failing_attempts_idx
		WHERE status = 'retrying' AND attempts >= ?1)
	SELECT f.host_id, f.source, MAX(d.attempts), COUNT(*)
	FROM f JOIN deliveries d INDEXED BY deliveries_failing_idx
		ON d.status = 'retrying' AND d.host_id = f.host_id AND d.source = f.source
	GROUP BY f.host_id, f.source ORDER BY MAX(d.attempts) DESC, f.host_id, f.source LIMIT ?2`

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
