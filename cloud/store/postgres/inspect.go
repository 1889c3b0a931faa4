package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/relaykit/relay/cloud/store"
)

const defaultFindLimit = 100

func (s *Store) DeliveryFind(ctx context.Context, p *store.DeliveryFindParams) ([]*store.Delivery, error) {
	q, args := findQuery(p)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("delivery find: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.Delivery, error) { return scanDelivery(r, false) })
	if err != nil {
		return nil, fmt.Errorf("delivery find: %w", err)
	}
	return list, nil
}

// findQuery is DeliveryFind's query with only the filters given, so that
// the planner sees which index serves it, whatever plan it caches: the
// delivery key for an event id (one look-up per source), a host's receipt
// order, or everyone's. A correlation id has no index of its own (a random
// key costs intake a random page per insert): it is found by reading
// newest first.
func findQuery(p *store.DeliveryFindParams) (string, []any) {
	var where []string
	var args []any
	add := func(cond string, v ...any) {
		for _, x := range v {
			args = append(args, x)
			cond = strings.Replace(cond, "?", "$"+strconv.Itoa(len(args)), 1)
		}
		where = append(where, cond)
	}
	if p.HostID != "" {
		add("host_id = ?", p.HostID)
	}
	if p.Status != "" {
		add("status = ?", string(p.Status))
	}
	if p.Source != "" {
		add("source = ?", p.Source)
	}
	if p.Provider != "" {
		add(`EXISTS (SELECT 1 FROM sources s
			WHERE s.host_id = deliveries.host_id AND s.name = deliveries.source AND s.provider = ?)`, p.Provider)
	}
	if p.EventID != "" {
		// Each of the hosts' sources, looked up by the delivery key.
		add("(host_id, source, event_id) IN (SELECT s.host_id, s.name, ? FROM sources s)", p.EventID)
	}
	if p.CorrelationID != "" {
		add("correlation_id = ?", p.CorrelationID)
	}
	if p.ReceivedSince != nil {
		add("received_at >= ?", ms(*p.ReceivedSince))
	}
	if p.BeforeReceivedAt != nil {
		add("(received_at, delivery_id) < (?, ?::text)", ms(*p.BeforeReceivedAt), p.BeforeID)
	}
	q := `SELECT ` + deliveryColumns + ` FROM deliveries`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	args = append(args, store.LimitOr(p.Limit, defaultFindLimit))
	q += ` ORDER BY received_at DESC, delivery_id DESC LIMIT $` + strconv.Itoa(len(args))
	return q, args
}

func (s *Store) DeliveryEventListAfter(ctx context.Context, p *store.DeliveryEventListAfterParams) ([]*store.DeliveryEventOf, error) {
	ids := `SELECT id FROM delivery_events WHERE id > $2 ORDER BY id LIMIT $1`
	args := []any{store.LimitOr(p.Limit, defaultFindLimit), p.AfterID}
	if p.Newest {
		ids, args = `SELECT id FROM delivery_events ORDER BY id DESC LIMIT $1`, args[:1]
	}
	rows, err := s.pool.Query(ctx, `
		SELECT e.id, e.delivery_id, e.at, e.from_status, e.to_status, e.reason, e.attempt, d.host_id, d.source
		FROM delivery_events e JOIN deliveries d ON d.delivery_id = e.delivery_id
		WHERE e.id IN (`+ids+`) ORDER BY e.id`, args...)
	if err != nil {
		return nil, fmt.Errorf("delivery event list after: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.DeliveryEventOf, error) {
		var e store.DeliveryEventOf
		if err := r.Scan(&e.ID, &e.DeliveryID, &e.At, &e.From, &e.To, &e.Reason, &e.Attempt, &e.HostID, &e.Source); err != nil {
			return nil, err
		}
		e.At = e.At.UTC()
		return &e, nil
	})
	if err != nil {
		return nil, fmt.Errorf("delivery event list after: %w", err)
	}
	return events, nil
}

func (s *Store) DeliveryResultGet(ctx context.Context, deliveryID string) (*store.DeliveryResult, error) {
	var r store.DeliveryResult
	err := s.pool.QueryRow(ctx, `
		SELECT delivery_id, attempt, result, handler, response_status, exit_code, duration_ms, error, reported_at
		FROM delivery_results WHERE delivery_id = $1`, deliveryID).Scan(
		&r.DeliveryID, &r.Attempt, &r.Result, &r.Handler, &r.ResponseStatus, &r.ExitCode, &r.DurationMS, &r.Error, &r.ReportedAt)
	if err != nil {
		return nil, fmt.Errorf("delivery result get: %w", interpretError(err))
	}
	r.ReportedAt = r.ReportedAt.UTC()
	return &r, nil
}

// recordResults keeps the results a host reported of its own deliveries,
// each replacing the one before, in one statement.
func recordResults(ctx context.Context, tx pgx.Tx, hostID string, results []store.DeliveryResult) error {
	if len(results) == 0 {
		return nil
	}
	rs := store.LastResults(results)
	var (
		ids, kinds, handlers, errs []string
		attempts, statuses, exits  []*int32
		durations                  []int64
		at                         []time.Time
	)
	for _, r := range rs {
		ids, kinds, handlers, errs = append(ids, r.DeliveryID), append(kinds, r.Result), append(handlers, r.Handler), append(errs, r.Error)
		attempts, statuses, exits = append(attempts, int32p(&r.Attempt)), append(statuses, int32p(r.ResponseStatus)), append(exits, int32p(r.ExitCode))
		durations, at = append(durations, r.DurationMS), append(at, ms(r.ReportedAt))
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO delivery_results (delivery_id, attempt, result, handler, response_status, exit_code,
			duration_ms, error, reported_at)
		SELECT d.delivery_id, r.attempt, r.result, r.handler, r.response_status, r.exit_code, r.duration_ms, r.error, r.at
		FROM unnest($1::text[], $2::integer[], $3::text[], $4::text[], $5::integer[], $6::integer[], $7::bigint[],
			$8::text[], $9::timestamptz[]) AS r(id, attempt, result, handler, response_status, exit_code, duration_ms, error, at)
		JOIN deliveries d ON d.delivery_id = r.id AND d.host_id = $10
		ON CONFLICT (delivery_id) DO UPDATE SET attempt = excluded.attempt, result = excluded.result,
			handler = excluded.handler, response_status = excluded.response_status,
			exit_code = excluded.exit_code, duration_ms = excluded.duration_ms, error = excluded.error,
			reported_at = excluded.reported_at`,
		ids, attempts, kinds, handlers, statuses, exits, durations, errs, at, hostID)
	if err != nil {
		return fmt.Errorf("record results: %w", err)
	}
	return nil
}

func int32p(p *int) *int32 {
	if p == nil {
		return nil
	}
	v := int32(*p)
	return &v
}
