package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/relaykit/relay/cloud/intake"
	"github.com/relaykit/relay/cloud/store"
)

// Copies of the loader's deliveries, for Postgres's largest sizes. The
// loader (fill.go) stores 800–950 webhooks/s on Postgres through the
// cloud's own code, so ten million take three hours and more. With
// -scale-base B the loader writes B of them and the rest of N are made
// here: each of the loader's deliveries copied N/B − 1 times by SQL, as
// one statement a chunk, into the same tables (the row, its body, its
// audit trail; the kept counts by the table's own triggers, folded as the
// cloud's sweep folds them). A copy changes only what is each webhook's
// own and leaves the rest as the loader wrote it:
//
//   - its event id, made as the loader makes one (ids.next: a GitHub
//     delivery's UUID, a Stripe evt_…), its delivery id from it
//     (store.DeliveryID), and the event id where the loader's row carries
//     it (the X-GitHub-Delivery header, a Stripe body's "id" and so the
//     body's digest where the source keeps one);
//   - its times: copy c of a delivery is received c·week/N before it, so
//     that the copies fall evenly between the loader's deliveries, and
//     every time of its row and its trail moves with it;
//   - its correlation id (intake.NewCorrelationID at its time) and its
//     traceparent's trace and span ids.
//
// A Stripe copy keeps its original's Stripe-Signature header, stored as
// the provider sent it and never checked again: it no longer matches the
// copy's body. Copies are of single-host deliveries only (no group's).
// copyChunk is how many of the loader's deliveries a statement copies. The
// loader's are copied in the order of their times, and a statement writes
// its copies in theirs, so that the tables lie in time order as intake
// leaves them (copied in the order of their random ids, each statement's
// copies spread over the whole week, and a retention batch's oldest rows
// over as many pages of each table).
var copyChunk = 2000

// copyWorkers is how many statements copy at once: two, so that one is
// planned and its arrays sent while the other writes. Each writes its
// chunk in time order, but two at once lie in time order only up to the
// chunks in flight: one that stalls lands after the chunks the other
// wrote meanwhile.
var copyWorkers = 2

// copyRow is one of the loader's deliveries as a copy needs it.
type copyRow struct {
	id, source, event string
	at                time.Time
}

// copyFill copies the loader's base deliveries in the Postgres database
// at dbURL until it holds n, then folds the counts; it returns how many
// it wrote.
func (f *fill) copyFill(ctx context.Context, dbURL string, base, n int) (int, error) {
	if base <= 0 || n <= base {
		return 0, nil
	}
	if n%base != 0 {
		return 0, fmt.Errorf("copies: -scale-base %d does not divide the size %d", base, n)
	}
	copies := n/base - 1
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, fmt.Errorf("copies: %w", err)
	}
	defer conn.Close(ctx)
	var stored, others int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE group_id <> '' OR body_of IS NOT NULL)
		FROM deliveries`).Scan(&stored, &others); err != nil {
		return 0, fmt.Errorf("copies: %w", err)
	}
	if stored != base || others != 0 {
		return 0, fmt.Errorf("copies: %d deliveries stored (%d of a group), want the loader's %d alone", stored, others, base)
	}
	rows, err := conn.Query(ctx, `SELECT delivery_id, source, event_id, received_at FROM deliveries ORDER BY received_at, delivery_id`)
	if err != nil {
		return 0, fmt.Errorf("copies: %w", err)
	}
	var r copyRow
	originals, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (copyRow, error) {
		err := row.Scan(&r.id, &r.source, &r.event, &r.at)
		return r, err
	})
	if err != nil {
		return 0, fmt.Errorf("copies: %w", err)
	}

	t0 := time.Now()
	type chunk struct {
		lo   int // its first delivery's place among the originals
		rows []copyRow
	}
	chunks := make(chan chunk)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		first   error
		written int
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range copyWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := pgx.Connect(ctx, dbURL)
			if err == nil {
				defer c.Close(context.Background())
			}
			for ch := range chunks {
				var w int
				if err == nil {
					w, err = f.copyChunk(ctx, c, ch.rows, base+ch.lo*copies, copies, n)
				}
				mu.Lock()
				if err != nil && first == nil {
					first = err
					cancel()
				}
				before := written * 20 / (n - base)
				written += w
				if now := written * 20 / (n - base); now > before && err == nil {
					f.logf("fill: %d of %d copied (%.0f/s)", written, n-base, float64(written)/time.Since(t0).Seconds())
				}
				mu.Unlock()
			}
		}()
	}
	for lo := 0; lo < len(originals) && ctx.Err() == nil; lo += copyChunk {
		select {
		case chunks <- chunk{lo, originals[lo:min(lo+copyChunk, len(originals))]}:
		case <-ctx.Done():
		}
	}
	close(chunks)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	if first != nil {
		return written, fmt.Errorf("copies: %w", first)
	}
	return written, f.fold(ctx)
}

// copyChunk writes copies copies of each of originals, of a store of n;
// from is the number of the first copy's webhook (the loader's are 0 to
// base − 1), which -ids counter makes its event id of.
func (f *fill) copyChunk(ctx context.Context, c *pgx.Conn, originals []copyRow, from, copies, n int) (int, error) {
	m := len(originals) * copies
	var (
		olds, ids, events, corrs, traces = make([]string, 0, m), make([]string, 0, m), make([]string, 0, m),
			make([]string, 0, m), make([]string, 0, m)
		shifts = make([]int64, 0, m)
		tid    [24]byte
	)
	span := fillSpan.Milliseconds()
	for i, o := range originals {
		for k := 1; k <= copies; k++ {
			shift := int64(k) * span / int64(n)
			at := o.at.Add(-time.Duration(shift) * time.Millisecond)
			ev := f.ids.next(o.source, int64(from+i*copies+k-1))
			_, _ = rand.Read(tid[:])
			olds, ids, events = append(olds, o.id), append(ids, store.DeliveryID(o.source, ev, at)), append(events, ev)
			corrs, shifts = append(corrs, intake.NewCorrelationID(at)), append(shifts, shift)
			traces = append(traces, "00-"+hex.EncodeToString(tid[:16])+"-"+hex.EncodeToString(tid[16:]))
		}
	}
	// A copy's row, body and trail, in one statement: the body read once
	// (a Stripe body with the copy's event id in it), the columns
	// everywhere else as the loader stored them but for the copy's own.
	// Each original is found by its key, its received millisecond first
	// (migration 27): by the id alone, each batch read the whole table.
	// The row goes in from the same CTE as its body (mb), not from m
	// joined to the bodies again: a join by the key's two conditions is
	// estimated at one row, and the join of two such CTEs was planned as
	// a nested loop, every copy compared with every other (324 million
	// comparisons a chunk, 1,500 copies/s where the primary key's plan
	// took 4,000).
	var written int
	err := c.QueryRow(ctx, `
		WITH m AS MATERIALIZED (
			SELECT m.*, d.*, m.shift_ms * interval '1 millisecond' AS shift
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[])
				AS m(old_id, new_id, new_ev, corr, trace, shift_ms)
			JOIN deliveries d ON right(d.delivery_id, 13) = right(m.old_id, 13) AND d.delivery_id = m.old_id
		), mb AS MATERIALIZED (
			SELECT m.*, CASE WHEN m.source = 'stripe'
				THEN convert_to(replace(convert_from(o.raw_body, 'UTF8'), m.event_id, m.new_ev), 'UTF8')
				ELSE o.raw_body END AS body
			FROM m JOIN delivery_bodies o ON right(o.delivery_id, 13) = right(m.old_id, 13) AND o.delivery_id = m.old_id
		), ins AS (
			INSERT INTO deliveries (delivery_id, host_id, source, event_id, event_type, event_action, headers,
				body_size, status, attempts, max_attempts, next_retry_at, lease_expires_at, last_error, received_at,
				delivered_at, acked_at, dlq_at, correlation_id, updated_at, retry_delays_ms, result, result_attempt,
				result_handler, result_response_status, result_exit_code, result_duration_ms, result_error,
				result_reported_at, body_sha256, group_id, lane, body_of)
			SELECT m.new_id, m.host_id, m.source, m.new_ev, m.event_type, m.event_action,
				regexp_replace(replace(m.headers::text, m.event_id, m.new_ev),
					'"traceparent":"00-[0-9a-f]{32}-[0-9a-f]{16}-', '"traceparent":"' || m.trace || '-')::json,
				m.body_size, m.status, m.attempts, m.max_attempts, m.next_retry_at - m.shift,
				m.lease_expires_at - m.shift, m.last_error, m.received_at - m.shift, m.delivered_at - m.shift,
				m.acked_at - m.shift, m.dlq_at - m.shift, m.corr, m.updated_at - m.shift, m.retry_delays_ms,
				m.result, m.result_attempt, m.result_handler, m.result_response_status, m.result_exit_code,
				m.result_duration_ms, m.result_error, m.result_reported_at - m.shift,
				CASE WHEN m.body_sha256 IS NOT NULL AND m.source = 'stripe' THEN sha256(m.body) ELSE m.body_sha256 END,
				m.group_id, m.lane, m.body_of
			FROM mb AS m
			ORDER BY m.received_at - m.shift
			RETURNING 1
		), bodies AS (
			INSERT INTO delivery_bodies (delivery_id, raw_body) SELECT new_id, body FROM mb ORDER BY received_at - shift
		), trail AS (
			INSERT INTO delivery_events (delivery_id, at, from_status, to_status, reason, attempt, host_id, source)
			SELECT m.new_id, e.at - m.shift, e.from_status, e.to_status, e.reason, e.attempt, e.host_id, e.source
			FROM m JOIN delivery_events e ON right(e.delivery_id, 13) = right(m.old_id, 13) AND e.delivery_id = m.old_id
			ORDER BY m.received_at - m.shift, m.new_id, e.id
		)
		SELECT count(*) FROM ins`, olds, ids, events, corrs, traces, shifts).Scan(&written)
	if err != nil {
		return 0, err
	}
	if written != m {
		return written, fmt.Errorf("%d copies not written", m-written)
	}
	return written, nil
}
