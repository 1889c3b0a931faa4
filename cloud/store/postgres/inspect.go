package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
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
	q, args := store.FindQuery(p, flow.DeliveryColumns, "(received_at, delivery_id) < (?, ?::text)", func(t time.Time) any { return ms(t) },
		"")
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

// eventsAfterQuery is DeliveryEventListAfter's query in Postgres.
func eventsAfterQuery(p *store.DeliveryEventListAfterParams) (string, []any) {
	q, args := store.EventsQuery(p, idIs("d.delivery_id", "e.delivery_id"))
	return numbered(q), args
}

func (s *Store) DeliveryEventListAfter(ctx context.Context, p *store.DeliveryEventListAfterParams) ([]*store.DeliveryEventOf, error) {
	q, args := eventsAfterQuery(p)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("delivery event list after: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.DeliveryEventOf, error) {
		var e store.DeliveryEventOf
		var host, source *string
		if err := r.Scan(&e.ID, &e.DeliveryID, &e.At, &e.From, &e.To, &e.Reason, &e.Attempt, &host, &source); err != nil {
			return nil, err
		}
		e.At = e.At.UTC()
		return store.OwnedEvent(&e, host, source), nil
	})
	if err != nil {
		return nil, fmt.Errorf("delivery event list after: %w", err)
	}
	return store.DropNil(events), nil
}

// resultGetQuery is DeliveryResultGet's query: delivery $1's last result.
var resultGetQuery = `SELECT delivery_id, result_attempt, result, result_handler, result_response_status,
	result_exit_code, result_duration_ms, result_error, result_reported_at
	FROM deliveries WHERE ` + idIs("delivery_id", "$1") + ` AND result IS NOT NULL`

func (s *Store) DeliveryResultGet(ctx context.Context, deliveryID string) (*store.DeliveryResult, error) {
	var r store.DeliveryResult
	err := s.pool.QueryRow(ctx, resultGetQuery, deliveryID).Scan(
		&r.DeliveryID, &r.Attempt, &r.Result, &r.Handler, &r.ResponseStatus, &r.ExitCode, &r.DurationMS, &r.Error, &r.ReportedAt)
	if err != nil {
		return nil, fmt.Errorf("delivery result get: %w", interpretError(err))
	}
	r.ReportedAt = r.ReportedAt.UTC()
	return &r, nil
}

// A delivery's last reported result lives in its row (migration 16), in
// resultColumns; result IS NULL until one is reported. A host reports a
// run's result with its ack: the ack's statement writes both into the same
// new version of the row (transition).
var resultColumns = []string{"result", "result_attempt", "result_handler", "result_response_status",
	"result_exit_code", "result_duration_ms", "result_error", "result_reported_at"}

// resultParams lists the parameters, from $first, of the arrays
// resultArrays returns, one per column of resultColumns.
func resultParams(first int) string {
	types := []string{"text", "integer", "text", "integer", "integer", "bigint", "text", "timestamptz"}
	params := make([]string, len(types))
	for i, t := range types {
		params[i] = "$" + strconv.Itoa(first+i) + "::" + t + "[]"
	}
	return strings.Join(params, ", ")
}

// resultArrays returns the results reported of ids as arrays beside them,
// one per column of resultColumns: each id's result in rs (one per
// delivery, bounded: store.LastResults), or NULLs where none is.
func resultArrays(ids []string, rs []store.DeliveryResult) []any {
	at := make(map[string]int, len(rs))
	for i, r := range rs {
		at[r.DeliveryID] = i
	}
	var (
		kinds, handlers, errs     = make([]*string, len(ids)), make([]*string, len(ids)), make([]*string, len(ids))
		attempts, statuses, exits = make([]*int32, len(ids)), make([]*int32, len(ids)), make([]*int32, len(ids))
		durations                 = make([]*int64, len(ids))
		reportedAt                = make([]*time.Time, len(ids))
	)
	for i, id := range ids {
		j, ok := at[id]
		if !ok {
			continue
		}
		r := &rs[j]
		kinds[i], handlers[i], errs[i] = &r.Result, &r.Handler, &r.Error
		attempts[i], statuses[i], exits[i] = int32p(&r.Attempt), int32p(r.ResponseStatus), int32p(r.ExitCode)
		t := ms(r.ReportedAt)
		durations[i], reportedAt[i] = &r.DurationMS, &t
	}
	return []any{kinds, attempts, handlers, statuses, exits, durations, errs, reportedAt}
}

// setReported assigns resultColumns from the columns of the same names of
// the row r, where its result is not NULL (the row's own values where it
// is).
func setReported(r string) string {
	set := make([]string, len(resultColumns))
	for i, c := range resultColumns {
		set[i] = c + " = CASE WHEN " + r + ".result IS NULL THEN d." + c + " ELSE " + r + "." + c + " END"
	}
	return strings.Join(set, ", ")
}

// recordResults writes the results a host reported of its own deliveries
// into their rows, each replacing the one before, in one statement. An ack
// writes those of the deliveries it acks itself (transition).
func recordResults(ctx context.Context, tx pgxQuerier, hostID string, results []store.DeliveryResult) error {
	if len(results) == 0 {
		return nil
	}
	rs := store.LastResults(results)
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.DeliveryID
	}
	_, err := tx.Exec(ctx, `UPDATE deliveries d SET `+setReported("r")+`
		FROM unnest($2::text[], `+resultParams(3)+`) AS r(delivery_id, `+strings.Join(resultColumns, ", ")+`)
		WHERE `+idIs("d.delivery_id", "r.delivery_id")+` AND `+ofHostByKey,
		append([]any{hostID, ids}, resultArrays(ids, rs)...)...)
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
