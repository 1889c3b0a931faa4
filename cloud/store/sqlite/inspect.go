package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/relaykit/relay/cloud/store"
)

func (s *Store) DeliveryFind(ctx context.Context, p *store.DeliveryFindParams) ([]*store.Delivery, error) {
	list, err := queryAll(ctx, s.read, scanDeliveryNoBody, `
		SELECT `+deliveryColumns+` FROM deliveries
		WHERE (?1 = '' OR host_id = ?1)
			AND (?2 = '' OR status = ?2)
			AND (?3 = '' OR source = ?3)
			AND (?4 = '' OR EXISTS (SELECT 1 FROM sources s
				WHERE s.host_id = deliveries.host_id AND s.name = deliveries.source AND s.provider = ?4))
			AND (?5 = '' OR event_id = ?5)
			AND (?6 = '' OR correlation_id = ?6)
			AND (?7 IS NULL OR received_at >= ?7)
			AND (?8 IS NULL OR (received_at, delivery_id) < (?8, ?9))
		ORDER BY received_at DESC, delivery_id DESC
		LIMIT ?10`,
		p.HostID, string(p.Status), p.Source, p.Provider, p.EventID, p.CorrelationID,
		dbTimePtr(p.ReceivedSince), dbTimePtr(p.BeforeReceivedAt), p.BeforeID, store.LimitOr(p.Limit, defaultListLimit))
	if err != nil {
		return nil, fmt.Errorf("delivery find: %w", err)
	}
	return list, nil
}

func (s *Store) DeliveryEventListAfter(ctx context.Context, p *store.DeliveryEventListAfterParams) ([]*store.DeliveryEventOf, error) {
	events, err := queryAll(ctx, s.read, func(r scanner) (*store.DeliveryEventOf, error) {
		var e store.DeliveryEventOf
		err := r.Scan(&e.ID, &e.DeliveryID, timeCol{&e.At}, &e.From, &e.To, &e.Reason, &e.Attempt, &e.HostID, &e.Source)
		return &e, err
	}, `
		SELECT e.id, e.delivery_id, e.at, e.from_status, e.to_status, e.reason, e.attempt, d.host_id, d.source
		FROM delivery_events e JOIN deliveries d ON d.delivery_id = e.delivery_id
		WHERE e.id IN (SELECT id FROM delivery_events WHERE ?1 OR id > ?2
			ORDER BY CASE WHEN ?1 THEN -id ELSE id END LIMIT ?3)
		ORDER BY e.id`, p.Newest, p.AfterID, store.LimitOr(p.Limit, defaultListLimit))
	if err != nil {
		return nil, fmt.Errorf("delivery event list after: %w", err)
	}
	return events, nil
}

func (s *Store) DeliveryResultGet(ctx context.Context, deliveryID string) (*store.DeliveryResult, error) {
	var r store.DeliveryResult
	var status, exit sql.NullInt64
	err := s.read.QueryRowContext(ctx, `
		SELECT delivery_id, attempt, result, handler, response_status, exit_code, duration_ms, error, reported_at
		FROM delivery_results WHERE delivery_id = ?`, deliveryID).Scan(
		&r.DeliveryID, &r.Attempt, &r.Result, &r.Handler, &status, &exit, &r.DurationMS, &r.Error, timeCol{&r.ReportedAt})
	if err != nil {
		return nil, fmt.Errorf("delivery result get: %w", interpretError(err))
	}
	r.ResponseStatus, r.ExitCode = intPtr(status), intPtr(exit)
	return &r, nil
}

func intPtr(n sql.NullInt64) *int {
	if !n.Valid {
		return nil
	}
	v := int(n.Int64)
	return &v
}

// recordResults keeps the results a host reported of its own deliveries,
// each replacing the one before.
func recordResults(ctx context.Context, tx *sql.Tx, hostID string, results []store.DeliveryResult) error {
	for _, r := range results {
		r = r.Bounded()
		_, err := tx.ExecContext(ctx, `
			INSERT INTO delivery_results (delivery_id, attempt, result, handler, response_status, exit_code,
				duration_ms, error, reported_at)
			SELECT delivery_id, ?, ?, ?, ?, ?, ?, ?, ? FROM deliveries WHERE delivery_id = ? AND host_id = ?
			ON CONFLICT (delivery_id) DO UPDATE SET attempt = excluded.attempt, result = excluded.result,
				handler = excluded.handler, response_status = excluded.response_status,
				exit_code = excluded.exit_code, duration_ms = excluded.duration_ms, error = excluded.error,
				reported_at = excluded.reported_at`,
			r.Attempt, r.Result, r.Handler, r.ResponseStatus, r.ExitCode, r.DurationMS, r.Error,
			dbTime(r.ReportedAt), r.DeliveryID, hostID)
		if err != nil {
			return fmt.Errorf("record result: %w", err)
		}
	}
	return nil
}
