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

// findQuery is DeliveryFind's query in Postgres.
func findQuery(p *store.DeliveryFindParams) (string, []any) {
	q, args := store.FindQuery(p, deliveryColumns, "(received_at, delivery_id) < (?, ?::text)", func(t time.Time) any { return ms(t) }, "")
	return numbered(q), args
}

// numbered writes a query's ? placeholders as $1, $2... in order.
func numbered(q string) string {
	var b strings.Builder
	n := 0
	for {
		i := strings.IndexByte(q, '?')
		if i < 0 {
			b.WriteString(q)
			return b.String()
		}
		n++
		b.WriteString(q[:i])
		b.WriteString("$" + strconv.Itoa(n))
		q = q[i+1:]
	}
}

func (s *Store) DeliveryEventListAfter(ctx context.Context, p *store.DeliveryEventListAfterParams) ([]*store.DeliveryEventOf, error) {
	q, args := store.EventsQuery(p, "d.delivery_id = e.delivery_id")
	rows, err := s.pool.Query(ctx, numbered(q), args...)
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
