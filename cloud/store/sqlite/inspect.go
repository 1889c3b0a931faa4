package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
)

func (s *Store) DeliveryFind(ctx context.Context, p *store.DeliveryFindParams) ([]*store.Delivery, error) {
	q, args := findQuery(p)
	list, err := queryAll(ctx, s.read, scanDeliveryNoBody, q, args...)
	if err != nil {
		return nil, fmt.Errorf("delivery find: %w", err)
	}
	return list, nil
}

// findQuery is DeliveryFind's query in SQLite.
func findQuery(p *store.DeliveryFindParams) (string, []any) {
	return store.FindQuery(p, flow.DeliveryColumns, "(received_at, delivery_id) < (?, ?)", func(t time.Time) any { return dbTime(t) },
		everyHost)
}

// everyHost finds deliveries in a status on every host. Each delivery has
// its host (a foreign key), so it selects the same rows as no condition;
// but SQLite then reads each host's deliveries in that status newest first
// (deliveries_host_status_idx), leaving a host once its next delivery is
// older than a full page's oldest, and sorts what it kept. Without it,
// SQLite walked everyone's deliveries newest first until a page of that
// status turned up: every delivery kept, when fewer than a page are older
// than the cursor.
const everyHost = "host_id IN (SELECT id FROM hosts)"

// eventsDelivery finds an event's delivery (see idKey).
var eventsDelivery = keyIs("d.delivery_id", "e.delivery_id")

func (s *Store) DeliveryEventListAfter(ctx context.Context, p *store.DeliveryEventListAfterParams) ([]*store.DeliveryEventOf, error) {
	q, args := store.EventsQuery(p, eventsDelivery)
	events, err := queryAll(ctx, s.read, func(r scanner) (*store.DeliveryEventOf, error) {
		var e store.DeliveryEventOf
		var host, source *string
		if err := r.Scan(&e.ID, &e.DeliveryID, timeCol{&e.At}, &e.From, &e.To, &e.Reason, &e.Attempt, &host, &source); err != nil {
			return nil, err
		}
		return store.OwnedEvent(&e, host, source), nil
	}, q, args...)
	if err != nil {
		return nil, fmt.Errorf("delivery event list after: %w", err)
	}
	return store.DropNil(events), nil
}

func (s *Store) DeliveryResultGet(ctx context.Context, deliveryID string) (*store.DeliveryResult, error) {
	var r store.DeliveryResult
	var status, exit sql.NullInt64
	err := s.read.QueryRowContext(ctx, `
		SELECT delivery_id, attempt, result, handler, response_status, exit_code, duration_ms, error, reported_at
		FROM delivery_results WHERE `+idKey, deliveryID, deliveryID).Scan(
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

// recordResult keeps a result of the host's delivery (the id twice, then
// the host), replacing the one before.
const recordResult = `
	INSERT INTO delivery_results (delivery_id, attempt, result, handler, response_status, exit_code,
		duration_ms, error, reported_at)
	SELECT delivery_id, ?, ?, ?, ?, ?, ?, ?, ? FROM deliveries WHERE ` + ofHost + `
	ON CONFLICT (substr(delivery_id, -13), delivery_id) DO UPDATE SET attempt = excluded.attempt, result = excluded.result,
		handler = excluded.handler, response_status = excluded.response_status,
		exit_code = excluded.exit_code, duration_ms = excluded.duration_ms, error = excluded.error,
		reported_at = excluded.reported_at`

// recordResults keeps the results a host reported of its own deliveries,
// each replacing the one before.
func recordResults(ctx context.Context, tx *txn, hostID string, results []store.DeliveryResult) error {
	if len(results) == 0 {
		return nil
	}
	stmt, done, err := tx.prepared(ctx, recordResult)
	if err != nil {
		return fmt.Errorf("record results: %w", err)
	}
	defer done()
	for _, r := range store.LastResults(results) {
		_, err := stmt.ExecContext(ctx, r.Attempt, r.Result, r.Handler, r.ResponseStatus, r.ExitCode, r.DurationMS, r.Error,
			dbTime(r.ReportedAt), r.DeliveryID, r.DeliveryID, hostID)
		if err != nil {
			return fmt.Errorf("record result: %w", err)
		}
	}
	return nil
}
