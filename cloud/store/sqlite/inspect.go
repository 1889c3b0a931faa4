package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/relaykit/relay/cloud/store"
)

func (s *Store) DeliveryFind(ctx context.Context, p *store.DeliveryFindParams) ([]*store.Delivery, error) {
	q, args := findQuery(p)
	list, err := queryAll(ctx, s.read, scanDeliveryNoBody, q, args...)
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
	add := func(cond string, v ...any) { where, args = append(where, cond), append(args, v...) }
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
		add("received_at >= ?", dbTime(*p.ReceivedSince))
	}
	if p.BeforeReceivedAt != nil {
		add("(received_at, delivery_id) < (?, ?)", dbTime(*p.BeforeReceivedAt), p.BeforeID)
	}
	q := `SELECT ` + deliveryColumns + ` FROM deliveries`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY received_at DESC, delivery_id DESC LIMIT ?`
	return q, append(args, store.LimitOr(p.Limit, defaultListLimit))
}

func (s *Store) DeliveryEventListAfter(ctx context.Context, p *store.DeliveryEventListAfterParams) ([]*store.DeliveryEventOf, error) {
	q, args := eventsQuery(p)
	events, err := queryAll(ctx, s.read, func(r scanner) (*store.DeliveryEventOf, error) {
		var e store.DeliveryEventOf
		err := r.Scan(&e.ID, &e.DeliveryID, timeCol{&e.At}, &e.From, &e.To, &e.Reason, &e.Attempt, &e.HostID, &e.Source)
		return &e, err
	}, q, args...)
	if err != nil {
		return nil, fmt.Errorf("delivery event list after: %w", err)
	}
	return events, nil
}

// eventsQuery reads events by id range: after an id, or the newest.
func eventsQuery(p *store.DeliveryEventListAfterParams) (string, []any) {
	ids := `SELECT id FROM delivery_events WHERE id > ? ORDER BY id LIMIT ?`
	args := []any{p.AfterID, store.LimitOr(p.Limit, defaultListLimit)}
	if p.Newest {
		ids, args = `SELECT id FROM delivery_events ORDER BY id DESC LIMIT ?`, args[1:]
	}
	return `SELECT e.id, e.delivery_id, e.at, e.from_status, e.to_status, e.reason, e.attempt, d.host_id, d.source
		FROM delivery_events e JOIN deliveries d ON d.delivery_id = e.delivery_id
		WHERE e.id IN (` + ids + `) ORDER BY e.id`, args
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
	if len(results) == 0 {
		return nil
	}
	stmt, err := tx.PrepareContext(ctx, `
		INSERT INTO delivery_results (delivery_id, attempt, result, handler, response_status, exit_code,
			duration_ms, error, reported_at)
		SELECT delivery_id, ?, ?, ?, ?, ?, ?, ?, ? FROM deliveries WHERE delivery_id = ? AND host_id = ?
		ON CONFLICT (delivery_id) DO UPDATE SET attempt = excluded.attempt, result = excluded.result,
			handler = excluded.handler, response_status = excluded.response_status,
			exit_code = excluded.exit_code, duration_ms = excluded.duration_ms, error = excluded.error,
			reported_at = excluded.reported_at`)
	if err != nil {
		return fmt.Errorf("record results: %w", err)
	}
	defer stmt.Close()
	for _, r := range store.LastResults(results) {
		_, err := stmt.ExecContext(ctx, r.Attempt, r.Result, r.Handler, r.ResponseStatus, r.ExitCode, r.DurationMS, r.Error,
			dbTime(r.ReportedAt), r.DeliveryID, hostID)
		if err != nil {
			return fmt.Errorf("record result: %w", err)
		}
	}
	return nil
}
