package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/relaykit/relay/cloud/store"
)

const defaultFindLimit = 100

func (s *Store) DeliveryFind(ctx context.Context, p *store.DeliveryFindParams) ([]*store.Delivery, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT `+deliveryColumns+` FROM deliveries
		WHERE ($1::text = '' OR host_id = $1)
			AND ($2::text = '' OR status = $2)
			AND ($3::text = '' OR source = $3)
			AND ($4::text = '' OR EXISTS (SELECT 1 FROM sources s
				WHERE s.host_id = deliveries.host_id AND s.name = deliveries.source AND s.provider = $4))
			AND ($5::text = '' OR event_id = $5)
			AND ($6::text = '' OR correlation_id = $6)
			AND ($7::timestamptz IS NULL OR received_at >= $7)
			AND ($8::timestamptz IS NULL OR (received_at, delivery_id) < ($8, $9::text))
		ORDER BY received_at DESC, delivery_id DESC
		LIMIT $10`,
		p.HostID, string(p.Status), p.Source, p.Provider, p.EventID, p.CorrelationID,
		msPtr(p.ReceivedSince), msPtr(p.BeforeReceivedAt), p.BeforeID, store.LimitOr(p.Limit, defaultFindLimit))
	if err != nil {
		return nil, fmt.Errorf("delivery find: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.Delivery, error) { return scanDelivery(r, false) })
	if err != nil {
		return nil, fmt.Errorf("delivery find: %w", err)
	}
	return list, nil
}

func (s *Store) DeliveryEventListAfter(ctx context.Context, p *store.DeliveryEventListAfterParams) ([]*store.DeliveryEventOf, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT e.id, e.delivery_id, e.at, e.from_status, e.to_status, e.reason, e.attempt, d.host_id, d.source
		FROM delivery_events e JOIN deliveries d ON d.delivery_id = e.delivery_id
		WHERE e.id IN (SELECT id FROM delivery_events WHERE $1 OR id > $2
			ORDER BY CASE WHEN $1 THEN -id ELSE id END LIMIT $3)
		ORDER BY e.id`, p.Newest, p.AfterID, store.LimitOr(p.Limit, defaultFindLimit))
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
// each replacing the one before.
func recordResults(ctx context.Context, tx pgx.Tx, hostID string, results []store.DeliveryResult) error {
	for _, r := range results {
		r = r.Bounded()
		_, err := tx.Exec(ctx, `
			INSERT INTO delivery_results (delivery_id, attempt, result, handler, response_status, exit_code,
				duration_ms, error, reported_at)
			SELECT delivery_id, $1, $2, $3, $4, $5, $6, $7, $8 FROM deliveries WHERE delivery_id = $9 AND host_id = $10
			ON CONFLICT (delivery_id) DO UPDATE SET attempt = excluded.attempt, result = excluded.result,
				handler = excluded.handler, response_status = excluded.response_status,
				exit_code = excluded.exit_code, duration_ms = excluded.duration_ms, error = excluded.error,
				reported_at = excluded.reported_at`,
			r.Attempt, r.Result, r.Handler, r.ResponseStatus, r.ExitCode, r.DurationMS, r.Error,
			ms(r.ReportedAt), r.DeliveryID, hostID)
		if err != nil {
			return fmt.Errorf("record result: %w", err)
		}
	}
	return nil
}
