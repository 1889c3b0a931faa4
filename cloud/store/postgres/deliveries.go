package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
	"github.com/relaykit/relay/shared/jsonwalk"
)

// idIs is the condition that the delivery id in column col is the id
// expr: the indexes of deliveries, delivery_bodies and delivery_events are
// led by the id's last 13 characters, its received millisecond, so that
// new rows are appended to them (migration 27). A condition on the column
// alone finds no index, and reads every row.
func idIs(col, expr string) string {
	return `right(` + col + `, 13) = right(` + expr + `, 13) AND ` + col + ` = ` + expr
}

// bodyColumn reads a delivery's body beside flow.DeliveryColumns: bodies live in
// a table of their own, so that state changes do not rewrite them.
var bodyColumn = `(SELECT raw_body FROM delivery_bodies b WHERE ` +
	idIs("b.delivery_id", "COALESCE(deliveries.body_of, deliveries.delivery_id)") + `)`

// scanDelivery scans flow.DeliveryColumns, followed by the body when withBody.
func scanDelivery(row pgx.Row, withBody bool) (*store.Delivery, error) {
	var d store.Delivery
	var headers, delays []byte
	dest := []any{&d.ID, &d.HostID, &d.Source, &d.EventID, &d.EventType, &d.EventAction, &headers, &d.BodySize,
		&d.Status, &d.Attempts, &d.MaxAttempts, &delays, &d.NextRetryAt, &d.LeaseExpiresAt, &d.LastError, &d.ReceivedAt,
		&d.DeliveredAt, &d.AckedAt, &d.DLQAt, &d.CorrelationID, &d.UpdatedAt, &d.GroupID, &d.Lane}
	if withBody {
		dest = append(dest, &d.RawBody)
	}
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	var err error
	if d.Headers, err = jsonwalk.Strings(headers); err != nil {
		return nil, fmt.Errorf("headers: %w", err)
	}
	if d.RetryDelays, err = decodeDelays(delays); err != nil {
		return nil, err
	}
	if withBody && d.RawBody == nil {
		d.RawBody = []byte{}
	}
	d.NextRetryAt = utcPtr(d.NextRetryAt)
	d.LeaseExpiresAt = utcPtr(d.LeaseExpiresAt)
	d.ReceivedAt = d.ReceivedAt.UTC()
	d.DeliveredAt = utcPtr(d.DeliveredAt)
	d.AckedAt = utcPtr(d.AckedAt)
	d.DLQAt = utcPtr(d.DLQAt)
	d.UpdatedAt = d.UpdatedAt.UTC()
	return &d, nil
}

func statusNames(statuses []store.Status) []string {
	names := make([]string, len(statuses))
	for i, s := range statuses {
		names[i] = string(s)
	}
	return names
}

// recordEvents appends entries to the audit trail, each with its
// delivery's host and source as they are (the delivery was changed in the
// same transaction: its row is at hand).
func recordEvents(ctx context.Context, tx pgxQuerier, events []store.DeliveryEvent) error {
	if len(events) == 0 {
		return nil
	}
	ids := make([]string, len(events))
	ats := make([]time.Time, len(events))
	froms := make([]string, len(events))
	tos := make([]string, len(events))
	reasons := make([]string, len(events))
	attempts := make([]int32, len(events))
	for i, e := range events {
		ids[i], ats[i], froms[i], tos[i], reasons[i], attempts[i] =
			e.DeliveryID, ms(e.At), string(e.From), string(e.To), e.Reason, int32(e.Attempt)
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO delivery_events (delivery_id, at, from_status, to_status, reason, attempt, host_id, source)
		SELECT e.delivery_id, e.at, e.from_status, e.to_status, e.reason, e.attempt, d.host_id, d.source
		FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::integer[]) WITH ORDINALITY
			AS e(delivery_id, at, from_status, to_status, reason, attempt, n)
		LEFT JOIN deliveries d ON `+idIs("d.delivery_id", "e.delivery_id")+`
		ORDER BY e.n`,
		ids, ats, froms, tos, reasons, attempts)
	if err != nil {
		return fmt.Errorf("record events: %w", err)
	}
	return nil
}

func (s *Store) DeliveryInsert(ctx context.Context, p *store.DeliveryInsertParams) (*store.DeliveryInsertResult, error) {
	res, err := s.DeliveryInsertBatch(ctx, []*store.DeliveryInsertParams{p})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// DeliveryInsertBatch writes the batch's new events with one statement in
// its own transaction — rows, their received events and the hosts' wake-ups
// in one round trip, the common case. Repeats are answered in a second
// transaction that locks the stored deliveries; only revivals cost a
// statement each. Rows are written in dedupe-key order, so two batches that
// share events wait for each other instead of deadlocking.
//
// When the second transaction fails the first has committed: results holds
// the inserts that were stored and the error concerns the rest.
func (s *Store) DeliveryInsertBatch(ctx context.Context, ps []*store.DeliveryInsertParams) ([]*store.DeliveryInsertResult, error) {
	rows, order, err := store.PrepareInserts(ps)
	if err != nil {
		return nil, err
	}
	results := make([]*store.DeliveryInsertResult, len(ps))
	var inserted map[string]*store.Delivery
	if slices.ContainsFunc(ps, func(p *store.DeliveryInsertParams) bool { return p.ReplayOf != nil }) {
		// A replay's note goes into its original's trail with it: one
		// transaction, off the intake's one-statement path.
		err = s.inTx(ctx, func(tx pgx.Tx) error {
			if inserted, err = insertRows(ctx, tx, rows, order); err != nil {
				return err
			}
			return noteReplays(ctx, tx, ps, inserted)
		})
	} else {
		inserted, err = insertRows(ctx, s.pool, rows, order)
	}
	if err != nil {
		return nil, fmt.Errorf("delivery insert: %w", interpretError(err))
	}
	repeats := answerInserted(ps, order, inserted, results)
	if len(repeats) == 0 {
		return results, nil
	}
	stored := slices.Clone(results)
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		copy(results, stored)
		woken := map[string]bool{}
		pending := repeats
		// An event neither inserted nor found either has a delivery id
		// another host's delivery took (the same event under the same source
		// name, received in the same millisecond) or was deleted (pruned)
		// between the two statements: it is inserted again, a millisecond on.
		for range store.MaxInsertRounds {
			existing, err := lockExisting(ctx, tx, ps, pending)
			if err != nil {
				return err
			}
			var missing []int
			for _, i := range pending {
				d := existing[ps[i].Key()]
				if d == nil {
					missing = append(missing, i)
					continue
				}
				res, err := revive(ctx, tx, d, ms(ps[i].ReceivedAt))
				if err != nil {
					return err
				}
				results[i] = res
				if res.Outcome == store.InsertRevived {
					existing[ps[i].Key()] = res.Delivery
					woken[d.HostID] = true
				}
			}
			if len(missing) == 0 {
				pending = nil
				break
			}
			store.MoveOn(rows, missing)
			inserted, err := insertRows(ctx, tx, rows, missing)
			if err != nil {
				return err
			}
			if pending = answerInserted(ps, missing, inserted, results); len(pending) == 0 {
				break
			}
		}
		if len(pending) > 0 {
			return errors.New("insert raced without a winner")
		}
		for hostID := range woken {
			if err := notifyAvailable(ctx, tx, hostID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		copy(results, stored)
		return results, fmt.Errorf("delivery insert: %w", interpretError(err))
	}
	return results, nil
}

// noteReplays records, for each replay among ps stored new (inserted), its
// note in the audit trail of the delivery it replays (its status and
// attempts as they are), if that one is still stored.
func noteReplays(ctx context.Context, tx pgx.Tx, ps []*store.DeliveryInsertParams, inserted map[string]*store.Delivery) error {
	for _, p := range ps {
		d := inserted[p.Key()]
		if p.ReplayOf == nil || d == nil {
			continue
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO delivery_events (delivery_id, at, from_status, to_status, reason, attempt, host_id, source)
			SELECT delivery_id, $1, status, status, $2, attempts, host_id, source FROM deliveries
			WHERE `+idIs("delivery_id", "$3")+` AND host_id = $4`,
			d.ReceivedAt, p.ReplayOf.Note, p.ReplayOf.ID, p.ReplayOf.HostID); err != nil {
			return fmt.Errorf("replay note: %w", err)
		}
	}
	return nil
}

// answerInserted sets results[i] for each i of idx whose event was just
// inserted, and returns the others: repeats of a stored delivery (or of an
// earlier insert of the batch, which it then duplicates).
func answerInserted(ps []*store.DeliveryInsertParams, idx []int, inserted map[string]*store.Delivery,
	results []*store.DeliveryInsertResult) (repeats []int) {
	for _, i := range idx {
		if d := inserted[ps[i].Key()]; d != nil {
			delete(inserted, ps[i].Key())
			results[i] = &store.DeliveryInsertResult{Delivery: d, Outcome: store.InsertQueued}
			continue
		}
		repeats = append(repeats, i)
	}
	return repeats
}

// querier runs a statement on the pool (a transaction of its own) or in a
// transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// insertRows inserts rows[i] for each i of idx (sorted by dedupe key) in one
// statement, skipping events already stored or repeated earlier in idx; it
// records each new row's received event and wakes its host's listeners. It
// returns the new deliveries by dedupe key.
func insertRows(ctx context.Context, q querier, rows []store.InsertRow, idx []int) (map[string]*store.Delivery, error) {
	// A key once: its repeats are answered as duplicates of the first.
	first := make([]int, 0, len(idx))
	for j, i := range idx {
		if j == 0 || rows[i].Key() != rows[idx[j-1]].Key() {
			first = append(first, i)
		}
	}
	n := len(first)
	var (
		ids, hosts, sources, events, types, actions, headers, correlations, reasons = make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n)
		bodies   = make([][]byte, n)
		sizes    = make([]int32, n)
		attempts = make([]int32, n)
		delays   = make([]*string, n)
		times    = make([]time.Time, n)
		statuses = make([]string, n)
		tries    = make([]int32, n)
		leases   = make([]*time.Time, n)
		leasedBy = make([]string, n)
		digests  = make([][]byte, n) // NULL where nil: unguarded sources
		groups   = make([]string, n)
		lanes    = make([]string, n)
		bodyOf   = make([]*string, n) // a fanout's: the key its shared body is stored under
		// The bodies to store, each under its key (its row's id, or a
		// fanout's shared key) for its row of r (1-based).
		bodyKeys = make([]string, 0, n)
		bodyRows = make([]int64, 0, n)
	)
	byKey := make(map[string]int, n)
	shares := map[*store.BodyShare]*string{}
	for j, i := range first {
		r := &rows[i]
		groups[j], lanes[j] = r.GroupID, r.Lane
		ids[j], hosts[j], sources[j], events[j], types[j], actions[j], headers[j], correlations[j], reasons[j] =
			r.ID, r.HostID, r.Source, r.EventID, r.EventType, r.EventAction, r.HeadersJSON, r.CorrelationID,
			r.ReceiveReason()
		bodies[j], sizes[j], attempts[j], delays[j], times[j] =
			r.Body, int32(len(r.Body)), int32(r.MaxAttempts), r.Delays, ms(r.ReceivedAt)
		statuses[j], tries[j], leases[j], leasedBy[j] = string(r.Status()), int32(r.Attempts()), r.LeaseUntil(ms(r.ReceivedAt)), r.LeaseReason()
		digests[j] = r.BodyDigest
		byKey[r.Key()] = i
		if r.Share != nil {
			// The body of a fanout's deliveries is stored once, under the
			// id of the first of them here (ON CONFLICT: another batch
			// may have stored it already), and sent once: the others'
			// are NULL.
			if shares[r.Share] == nil {
				shares[r.Share] = &r.ID
			} else {
				bodies[j] = nil
			}
			bodyOf[j] = shares[r.Share]
		}
		if bodies[j] != nil || r.Share == nil {
			bodyKeys, bodyRows = append(bodyKeys, r.ID), append(bodyRows, int64(j+1))
			bodies[len(bodyKeys)-1] = bodies[j]
		}
	}
	bodies = bodies[:len(bodyKeys)]
	// A row whose event is stored, or whose delivery id another event has,
	// is skipped; the caller tells which. A row stored leased (InsertRow)
	// gets its lease's audit event after its receipt's, and wakes no one:
	// its connection pushes it. The notifications are counted in a
	// sub-select evaluated once, and only when a row was inserted. The
	// bodies go from their parameter into their table and nowhere else: a
	// 300 KB body carried through r and new was copied into each part of
	// the statement that read them (5.4 ms a lone insert, against 2.2).
	out, err := q.Query(ctx, `
		WITH r AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::json[],
				$9::integer[], $10::integer[], $11::jsonb[], $12::timestamptz[], $13::text[], $14::text[],
				$17::text[], $18::integer[], $19::timestamptz[], $20::text[], $21::bytea[], $22::text[], $23::text[], $24::text[])
				WITH ORDINALITY
				AS r(id, host, src, ev, typ, act, hdr, size, att, delays, at, corr, reason, status, tries, lease, lreason, dig,
					grp, lane, body_of, n)
		), ins AS (
			INSERT INTO deliveries (delivery_id, host_id, source, event_id, event_type, event_action, headers,
				body_size, status, attempts, max_attempts, retry_delays_ms, lease_expires_at, received_at,
				correlation_id, updated_at, body_sha256, group_id, lane, body_of)
			SELECT id, host, src, ev, typ, act, hdr, size, status, tries, att, delays, lease, at, corr, at, dig,
				grp, lane, body_of FROM r
			ON CONFLICT DO NOTHING
			RETURNING delivery_id, host_id, source, event_id, received_at, status, group_id, lane, body_of
		), new AS (
			SELECT ins.delivery_id, ins.host_id, ins.source, ins.received_at, ins.status, r.reason, r.lreason, r.n FROM ins
				JOIN r ON (r.id, r.host, r.src, r.ev) = (ins.delivery_id, ins.host_id, ins.source, ins.event_id)
		), bodies AS (
			INSERT INTO delivery_bodies (delivery_id, raw_body)
			SELECT b.key, b.body FROM unnest($25::text[], $26::bigint[], $8::bytea[]) AS b(key, n, body)
			WHERE b.n IN (SELECT n FROM new) OR b.key IN (SELECT body_of FROM ins)
			ON CONFLICT DO NOTHING
		), received AS (
			INSERT INTO delivery_events (delivery_id, at, from_status, to_status, reason, attempt, host_id, source)
			SELECT delivery_id, at, from_status, to_status, reason, attempt, host_id, source FROM (
				SELECT delivery_id, received_at AS at, '' AS from_status, $15 AS to_status, reason, 0 AS attempt,
					host_id, source, 0 AS k
				FROM new
				UNION ALL
				SELECT delivery_id, received_at, $15, status, lreason, 1, host_id, source, 1 FROM new WHERE status <> $15
			) e ORDER BY delivery_id, k
		)
		SELECT host_id, source, event_id, group_id, lane, (SELECT count(*) FROM (
			SELECT pg_notify($16, h) FROM (SELECT DISTINCT host_id AS h FROM ins WHERE status = $15) hosts) woken)
		FROM ins`,
		ids, hosts, sources, events, types, actions, headers, bodies, sizes, attempts, delays, times, correlations,
		reasons, string(store.TransitionReceive.To), availableChannel, statuses, tries, leases, leasedBy, digests,
		groups, lanes, bodyOf, bodyKeys, bodyRows)
	if err != nil {
		return nil, err
	}
	// What was written need not be read back: each new row is its params.
	inserted := make(map[string]*store.Delivery, n)
	var (
		host, source, event, group, lane string
		woken                            int64
	)
	_, err = pgx.ForEachRow(out, []any{&host, &source, &event, &group, &lane, &woken}, func() error {
		key := store.DedupeKey(host, source, event)
		if group != "" {
			key = store.GroupDedupeKey(group, source, event, lane)
		}
		r := &rows[byKey[key]]
		inserted[r.Key()] = r.Inserted(ms(r.ReceivedAt))
		return nil
	})
	return inserted, err
}

// lockExisting reads and locks the stored deliveries of ps[i] for each i
// of idx, by dedupe key.
func lockExisting(ctx context.Context, tx pgx.Tx, ps []*store.DeliveryInsertParams, idx []int) (map[string]*store.Delivery, error) {
	var hosts, sources, events, groups, gsources, gevents, lanes []string
	for _, i := range idx {
		if p := ps[i]; p.GroupID != "" {
			groups, gsources, gevents, lanes = append(groups, p.GroupID), append(gsources, p.Source), append(gevents, p.EventID), append(lanes, p.Lane)
		} else {
			hosts, sources, events = append(hosts, p.HostID), append(sources, p.Source), append(events, p.EventID)
		}
	}
	byKey := map[string]*store.Delivery{}
	if len(hosts) > 0 {
		out, err := tx.Query(ctx, `
			SELECT `+flow.DeliveryColumns+` FROM deliveries
			WHERE group_id = '' AND (host_id, source, event_id) IN (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))
			ORDER BY host_id, source, event_id
			FOR UPDATE`, hosts, sources, events)
		if err != nil {
			return nil, err
		}
		if err := collectByKey(out, byKey); err != nil {
			return nil, err
		}
	}
	if len(groups) > 0 {
		out, err := tx.Query(ctx, `
			SELECT `+flow.DeliveryColumns+` FROM deliveries
			WHERE group_id <> '' AND (group_id, source, event_id, lane) IN
				(SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]))
			ORDER BY group_id, source, event_id, lane
			FOR UPDATE`, groups, gsources, gevents, lanes)
		if err != nil {
			return nil, err
		}
		if err := collectByKey(out, byKey); err != nil {
			return nil, err
		}
	}
	return byKey, nil
}

// collectByKey adds the deliveries of rows to byKey, by dedupe key.
func collectByKey(rows pgx.Rows, byKey map[string]*store.Delivery) error {
	defer rows.Close()
	for rows.Next() {
		d, err := scanDelivery(rows, false)
		if err != nil {
			return err
		}
		byKey[store.KeyOf(d)] = d
	}
	return rows.Err()
}

// revive answers a repeat of an existing delivery: a dead-lettered one goes
// back to the queue with its attempts reset, any other is a duplicate.
func revive(ctx context.Context, tx pgx.Tx, existing *store.Delivery, now time.Time) (*store.DeliveryInsertResult, error) {
	if !store.TransitionRevive.Allows(existing.Status) {
		return &store.DeliveryInsertResult{Delivery: existing, Outcome: store.InsertDuplicate}, nil
	}
	d, err := requeue(ctx, tx, store.TransitionRevive, existing, now)
	if err != nil {
		return nil, err
	}
	return &store.DeliveryInsertResult{Delivery: d, Outcome: store.InsertRevived}, nil
}

// requeue applies tr (revive or retry) to a delivery locked in this
// transaction: back to the queue, attempts reset and the attempts budget
// it was stored with (store.RequeueMaxAttempts: less its hand-backs since
// it was last requeued), with an audit event.
func requeue(ctx context.Context, tx pgx.Tx, tr store.Transition, existing *store.Delivery, now time.Time) (*store.Delivery, error) {
	requeued := make([]string, len(store.Requeued))
	for i, r := range store.Requeued {
		requeued[i] = r.Reason
	}
	var handBacks int
	if err := tx.QueryRow(ctx, `
		SELECT count(*) FROM delivery_events
		WHERE `+idIs("delivery_id", "$1")+` AND reason = $2 AND id > (SELECT coalesce(max(id), 0) FROM delivery_events
			WHERE `+idIs("delivery_id", "$1")+` AND reason = ANY($3))`,
		existing.ID, store.TransitionHandBack.Reason, requeued).Scan(&handBacks); err != nil {
		return nil, err
	}
	d, err := scanDelivery(tx.QueryRow(ctx, `
		UPDATE deliveries
		SET status = $2, attempts = 0, max_attempts = $5, next_retry_at = NULL, lease_expires_at = NULL, dlq_at = NULL,
			last_error = '', updated_at = $3
		WHERE `+idIs("delivery_id", "$1")+` AND status = ANY($4)
		RETURNING `+flow.DeliveryColumns,
		existing.ID, string(tr.To), now, statusNames(tr.From), store.RequeueMaxAttempts(existing.MaxAttempts, handBacks)), false)
	if err != nil {
		return nil, err
	}
	err = recordEvents(ctx, tx, []store.DeliveryEvent{{
		DeliveryID: d.ID, At: now, From: existing.Status, To: tr.To, Reason: tr.Reason,
	}})
	if err != nil {
		return nil, err
	}
	return d, nil
}

func (s *Store) DeliveryRetry(ctx context.Context, p *store.DeliveryRetryParams) (*store.Delivery, error) {
	now := ms(p.Now)
	tr := store.TransitionRetry
	var d *store.Delivery
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		existing, err := scanDelivery(tx.QueryRow(ctx, `
			SELECT `+flow.DeliveryColumns+` FROM deliveries WHERE host_id = $1 AND `+idIs("delivery_id", "$2")+`
			FOR UPDATE`, p.HostID, p.ID), false)
		if err != nil {
			return err
		}
		if !tr.Allows(existing.Status) {
			return &store.TransitionError{DeliveryID: existing.ID, Status: existing.Status, Transition: tr}
		}
		if d, err = requeue(ctx, tx, tr, existing, now); err != nil {
			return err
		}
		return notifyAvailable(ctx, tx, p.HostID)
	})
	if err != nil {
		return nil, fmt.Errorf("delivery retry: %w", interpretError(err))
	}
	return d, nil
}

// availableChannel is the LISTEN/NOTIFY channel on which a host's id says
// that deliveries became available to it.
const availableChannel = "relay_deliveries_available"

// notifyAvailable tells every listener, once tx commits, that the host has
// deliveries available.
func notifyAvailable(ctx context.Context, tx pgxQuerier, hostID string) error {
	_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, availableChannel, hostID)
	return err
}

func (s *Store) DeliveryListen(ctx context.Context, p *store.DeliveryListenParams) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("delivery listen: %w", err)
	}
	// The listening session is this call's alone: it never goes back to the
	// pool.
	conn := pc.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	for _, channel := range []string{availableChannel, changedChannel, socketChannel, stoppingChannel, ipSetChannel} {
		if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{channel}.Sanitize()); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("delivery listen: %w", err)
		}
	}
	s.listenPID.Store(conn.PgConn().PID())
	defer s.listenPID.Store(0)
	if p.Listening != nil {
		p.Listening()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("delivery listen: %w", err)
		}
		switch {
		case n.Channel == availableChannel:
			p.Available(n.Payload)
		case n.Channel == socketChannel:
			if e, ok := parseSocketEvent(n.Payload); ok && p.Socket != nil {
				p.Socket(e)
			}
		case n.Channel == stoppingChannel:
			if p.Stopping != nil {
				p.Stopping(n.Payload)
			}
		case n.Channel == ipSetChannel:
			if p.IPSetChanged != nil {
				p.IPSetChanged(n.Payload)
			}
		case p.Changed != nil:
			p.Changed(n.Payload)
		}
	}
}

// stoppingChannel is the LISTEN/NOTIFY channel on which a host's id says
// that the host is stopping (HostStopping).
const stoppingChannel = "relay_host_stopping"

func (s *Store) HostStopping(ctx context.Context, hostID string) error {
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, stoppingChannel, hostID); err != nil {
		return fmt.Errorf("host stopping: %w", err)
	}
	return nil
}

// getQuery is DeliveryGet's query: a host ($1)'s delivery ($2) with its
// body.
var getQuery = `SELECT ` + flow.DeliveryColumns + `, ` + bodyColumn + ` FROM deliveries WHERE host_id = $1 AND ` +
	idIs("delivery_id", "$2")

func (s *Store) DeliveryGet(ctx context.Context, hostID, id string) (*store.Delivery, error) {
	d, err := scanDelivery(s.pool.QueryRow(ctx, getQuery, hostID, id), true)
	if err != nil {
		return nil, fmt.Errorf("delivery get: %w", interpretError(err))
	}
	return d, nil
}

// listQuery is DeliveryList's query and its arguments: a host's
// deliveries, newest first, in a status, of a source, older than a cursor
// (each only when given), at most a limit. A filter not given is left
// out, never written as "$n is empty or …": a statement the pool prepared
// is planned once for any arguments after a few runs, and a plan that
// must also serve "any status" walks the host's deliveries newest first,
// every one of them when none has the status asked for.
func listQuery(p *store.DeliveryListParams) (string, []any) {
	var args []any
	next := func(v any) string { // v's placeholder
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	where := []string{"host_id = " + next(p.HostID)}
	if p.Status != "" {
		where = append(where, "status = "+next(string(p.Status)))
	}
	if p.Source != "" {
		where = append(where, "source = "+next(p.Source))
	}
	if p.BeforeReceivedAt != nil {
		where = append(where, "(received_at, delivery_id) < ("+next(ms(*p.BeforeReceivedAt))+", "+next(p.BeforeID)+")")
	}
	return `SELECT ` + flow.DeliveryColumns + ` FROM deliveries WHERE ` + strings.Join(where, " AND ") + `
		ORDER BY received_at DESC, delivery_id DESC LIMIT ` + next(store.LimitOr(p.Limit, flow.DefaultListLimit)), args
}

func (s *Store) DeliveryList(ctx context.Context, p *store.DeliveryListParams) ([]*store.Delivery, error) {
	q, args := listQuery(p)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("delivery list: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.Delivery, error) { return scanDelivery(r, false) })
	if err != nil {
		return nil, fmt.Errorf("delivery list: %w", err)
	}
	return list, nil
}

// eventListQuery is DeliveryEventList's query: delivery $1's audit trail.
var eventListQuery = `SELECT id, delivery_id, at, from_status, to_status, reason, attempt
	FROM delivery_events WHERE ` + idIs("delivery_id", "$1") + ` ORDER BY id`

func (s *Store) DeliveryEventList(ctx context.Context, deliveryID string) ([]*store.DeliveryEvent, error) {
	rows, err := s.pool.Query(ctx, eventListQuery, deliveryID)
	if err != nil {
		return nil, fmt.Errorf("delivery event list: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.DeliveryEvent, error) {
		var e store.DeliveryEvent
		if err := r.Scan(&e.ID, &e.DeliveryID, &e.At, &e.From, &e.To, &e.Reason, &e.Attempt); err != nil {
			return nil, err
		}
		e.At = e.At.UTC()
		return &e, nil
	})
	if err != nil {
		return nil, fmt.Errorf("delivery event list: %w", err)
	}
	return events, nil
}

// candidatesQuery reads the host's first available deliveries, $3 of them
// at most, due by $2, locking them (DeliveryLease), under candidatesPlan.
const (
	candidatesPlan  = `SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off`
	candidatesQuery = `
		SELECT delivery_id, status, body_size FROM deliveries
		WHERE host_id = $1 AND (status = 'queued' OR (status = 'retrying' AND next_retry_at <= $2))
		ORDER BY received_at, delivery_id
		LIMIT $3
		FOR UPDATE SKIP LOCKED`
)

func (s *Store) DeliveryLease(ctx context.Context, p *store.DeliveryLeaseParams) (*store.DeliveryLeaseResult, error) {
	max := p.Max
	if max <= 0 {
		max = flow.DefaultLeaseMax
	}
	now := ms(p.Now)
	leaseUntil := ms(p.Now.Add(p.LeaseFor))
	tr := store.LeaseOn(p.Via)

	var leased []*store.Delivery
	var more bool
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// The candidates are the first rows of the host's run in the
		// available index, read in its order. A planner that believes the
		// host has a handful of rows (statistics taken before a burst
		// queued its backlog) reads the whole run and sorts it instead, for
		// every lease: 140 ms a lease with 100,000 queued, a drain
		// quadratic in its backlog. Neither a bitmap nor a sort can serve
		// this query well, so neither is considered (for this query only:
		// without sorts the statement after it plans far worse).
		if _, err := tx.Exec(ctx, candidatesPlan); err != nil {
			return err
		}
		// One candidate more than fits says whether work is left over (rows
		// other claimers hold are skipped: they are being handed out).
		rows, err := tx.Query(ctx, candidatesQuery, p.HostID, now, max+1)
		if err != nil {
			return err
		}
		var ids, from []string
		var sizes []int
		var id, status string
		var size int
		_, err = pgx.ForEachRow(rows, []any{&id, &status, &size}, func() error {
			ids = append(ids, id)
			from = append(from, status)
			sizes = append(sizes, size)
			return nil
		})
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `RESET enable_bitmapscan; RESET enable_sort`); err != nil {
			return err
		}
		cut := store.LeaseCut(sizes, max, p.MaxBytes)
		more = cut < len(ids)
		ids, from = ids[:cut], from[:cut]
		if len(ids) == 0 {
			return nil
		}
		// The candidates are locked: their statuses stand for the audit
		// events, written by the same statement.
		rows, err = tx.Query(ctx, leaseStatement,
			ids, string(tr.To), leaseUntil, now, statusNames(tr.From), tr.Reason, from)
		if err != nil {
			return err
		}
		leased, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.Delivery, error) { return scanDelivery(r, true) })
		if err != nil {
			return err
		}
		flow.InLeaseOrder(leased)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("delivery lease: %w", interpretError(err))
	}
	return &store.DeliveryLeaseResult{Deliveries: leased, More: more}, nil
}

// leaseStatement leases deliveries $1 (locked, in statuses $5, each
// $7's), each found by its key: sets status $2, the lease's end $3 and
// the time $4, writes each one's audit event (reason $6), and returns
// them with their bodies. Each row's status before comes out of the
// update with it: the planner estimates a join by the key's two
// conditions at one row, and joined to the ids again, the changed rows
// were compared with every id.
var leaseStatement = `
	WITH changed AS (
		UPDATE deliveries
		SET status = $2, attempts = attempts + 1, lease_expires_at = $3, next_retry_at = NULL, updated_at = $4
		FROM unnest($1::text[], $7::text[]) AS leased(key_id, from_status)
		WHERE ` + idIs("deliveries.delivery_id", "leased.key_id") + ` AND status = ANY($5)
		RETURNING ` + flow.DeliveryColumns + `, ` + bodyColumn + ` AS raw_body, leased.from_status
	), events AS (
		INSERT INTO delivery_events (delivery_id, at, from_status, to_status, reason, attempt, host_id, source)
		SELECT delivery_id, $4, from_status, $2, $6, attempts, host_id, source FROM changed
		ORDER BY received_at, delivery_id
	)
	SELECT ` + flow.DeliveryColumns + `, raw_body FROM changed`

// lockTransitionable locks host $1's deliveries among ids $2 whose status
// is among $3 (those a transition allows), and returns their
// flow.FailingColumns: each found by its key (lockByKey), in id order so that
// concurrent callers cannot deadlock.
var lockTransitionable = `SELECT d.* FROM (SELECT DISTINCT delivery_id FROM unnest($2::text[]) AS i(delivery_id) ORDER BY 1) a
	CROSS JOIN LATERAL (SELECT ` + flow.FailingColumns + ` FROM deliveries d WHERE ` + lockByKey + `) d`

// collectFailing reads flow.FailingColumns: deliveries whose attempt is
// failing, as the delivery core decides from.
func collectFailing(rows pgx.Rows) ([]store.Failing, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Failing, error) {
		var f store.Failing
		var delays []byte
		if err := r.Scan(&f.ID, &f.HostID, &f.Status, &f.Attempts, &f.MaxAttempts, &delays, &f.GroupID, &f.Lane); err != nil {
			return f, err
		}
		var err error
		f.RetryDelays, err = decodeDelays(delays)
		return f, err
	})
}

// lockByKey, the condition of a sub-select of deliveries d beside a row a
// of ids (a LATERAL join), locks the delivery a.delivery_id when it is
// host $1's and in a status among $3: by its key, one look-up per id,
// whatever the statistics say. Joined or matched to the ids as a whole,
// the deliveries were read by an index of their host or status whenever
// statistics taken before a backlog queued made those look cheaper (an ack
// of 500 read every delivering row of its host), or by the whole table
// while it was small (the database's CPU per delivery in a drain nearly
// doubled). Host and status are written so that no
// index of theirs serves the look-up (ofHostByKey).
var lockByKey = idIs("d.delivery_id", "a.delivery_id") + ` AND ` + ofHostByKey + ` AND d.status || '' = ANY($3)
	FOR UPDATE`

// ofHostByKey keeps a look-up of deliveries d by their keys to host $1's
// without offering the planner an index of the host for it.
const ofHostByKey = `d.host_id || '' = $1`

// rowQuerier is the pool, or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// transition applies tr to the host's deliveries among ids that it allows,
// in one statement (one round trip): it locks them (lockByKey, in id order, so
// that concurrent callers cannot deadlock), sets status to tr.To (kept when
// tr.To is empty) plus the columns in set, and writes each one's audit
// event. set may use $5 (now) and parameters from $8 on, args. A delivery
// among written still delivering is recorded delivered first (delivered_at
// and its own event, at its write time) in the same change of its row: each
// change of a row is a new version of it, with an entry in each of the
// table's indexes. So are the results the host reported: those of the
// deliveries changed go into the same change of their rows, the others'
// (not in a status tr allows: acked already, say) into theirs.
func transition(ctx context.Context, q rowQuerier, tr store.Transition, hostID string, ids []string, written []store.Written, results []store.DeliveryResult, now time.Time, set string, args ...any) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	first := 0 // the result arrays' first parameter; 0: none
	if len(results) > 0 {
		first = 8 + len(args)
		args = append(args, resultArrays(ids, store.LastResults(results))...)
	}
	// Each id's write time, or NULL: an array beside ids.
	writtenAt := make([]*time.Time, len(ids))
	if len(written) > 0 {
		at := make(map[string]time.Time, len(written))
		for _, w := range written {
			at[w.ID] = ms(w.At)
		}
		for i, id := range ids {
			if t, ok := at[id]; ok {
				writtenAt[i] = &t
			}
		}
	}
	var n int
	err := q.QueryRow(ctx, transitionStatement(set, len(written) > 0, first),
		append([]any{hostID, ids, statusNames(tr.From), string(tr.To), now, tr.Reason, writtenAt}, args...)...).Scan(&n)
	return n, err
}

// transitionStatement is transition's statement, setting the columns in
// set, delivered_at from the write times when written, and the reported
// results when resultsFrom (their arrays' first parameter) is not 0.
func transitionStatement(set string, written bool, resultsFrom int) string {
	// The results come as arrays beside ids, like the write times: joined
	// to the locked rows by key, a planner expecting a handful of rows
	// compared every row with every other.
	reported, named, carried, others := "", "", "", ""
	if resultsFrom != 0 {
		reported = `, ` + resultParams(resultsFrom)
		named = `, ` + strings.Join(resultColumns, ", ")
		carried = `, a.` + strings.Join(resultColumns, ", a.")
		set += `, ` + setReported("locked")
		others = `, others AS (
			UPDATE deliveries d SET ` + setReported("r") + `
			FROM unnest($2::text[], ` + resultParams(resultsFrom) + `) AS r(delivery_id, ` + strings.Join(resultColumns, ", ") + `)
			WHERE r.result IS NOT NULL AND ` + idIs("d.delivery_id", "r.delivery_id") + ` AND ` + ofHostByKey + `
				AND r.delivery_id NOT IN (SELECT delivery_id FROM locked)
		)`
	}
	if written {
		set += `, delivered_at = CASE WHEN locked.status = 'delivering' AND locked.written_at IS NOT NULL
			THEN locked.written_at ELSE d.delivered_at END`
	}
	return `
		WITH locked AS (
			SELECT d.delivery_id, d.status, a.written_at` + carried + `
			FROM (SELECT * FROM unnest($2::text[], $7::timestamptz[]` + reported + `)
				AS a(delivery_id, written_at` + named + `) ORDER BY delivery_id) a
			CROSS JOIN LATERAL (SELECT d.delivery_id, d.status FROM deliveries d WHERE ` + lockByKey + `) d
		), changed AS (
			UPDATE deliveries d SET status = COALESCE(NULLIF($4::text, ''), d.status), ` + set + `
			FROM locked WHERE ` + idIs("d.delivery_id", "locked.delivery_id") + `
			RETURNING d.delivery_id, d.host_id, d.source, locked.status AS from_status, d.status AS to_status, d.attempts,
				CASE WHEN locked.status = 'delivering' THEN locked.written_at END AS written_at
		), events AS (
			INSERT INTO delivery_events (delivery_id, at, from_status, to_status, reason, attempt, host_id, source)
			SELECT delivery_id, at, from_status, to_status, reason, attempts, host_id, source FROM (
				SELECT delivery_id, written_at AS at, 'delivering' AS from_status, 'delivered' AS to_status,
					'` + store.TransitionDelivered.Reason + `' AS reason, attempts, host_id, source, 0 AS step
				FROM changed WHERE written_at IS NOT NULL
				UNION ALL
				SELECT delivery_id, $5, CASE WHEN written_at IS NOT NULL THEN 'delivered' ELSE from_status END,
					to_status, $6, attempts, host_id, source, 1
				FROM changed
			) e ORDER BY delivery_id, step
		)` + others + `
		SELECT count(*) FROM changed`
}

func (s *Store) DeliveryMarkDelivered(ctx context.Context, p *store.DeliveryMarkDeliveredParams) (int, error) {
	now := ms(p.Now)
	n, err := transition(ctx, s.pool, store.TransitionDelivered, p.HostID, p.IDs, nil, nil, now,
		`delivered_at = $5, updated_at = $5`)
	if err != nil {
		return 0, fmt.Errorf("delivery mark delivered: %w", interpretError(err))
	}
	return n, nil
}

// ack acks p's deliveries and records results, those of the deliveries it
// acks in the same change of their rows.
func ack(ctx context.Context, q rowQuerier, p *store.DeliveryAckParams, results []store.DeliveryResult) (int, error) {
	return transition(ctx, q, store.TransitionAck, p.HostID, p.IDs, p.Written, results, ms(p.Now), ackSet)
}

// ackSet is what an ack sets beside the status (transition).
const ackSet = `acked_at = $5, updated_at = $5, lease_expires_at = NULL, next_retry_at = NULL`

func extend(ctx context.Context, q rowQuerier, p *store.DeliveryExtendParams) (int, error) {
	return transition(ctx, q, store.TransitionExtend, p.HostID, p.IDs, nil, nil, ms(p.Now),
		`lease_expires_at = $8, updated_at = $5`, ms(p.Now.Add(p.LeaseFor)))
}

func (s *Store) DeliveryReport(ctx context.Context, p *store.DeliveryReportParams) (*store.DeliveryReportResult, error) {
	var res *store.DeliveryReportResult
	var err error
	if flow.OneStep(p) {
		// Acks alone (with their results), or extends alone, are one
		// statement: no transaction of its own needed (two round trips
		// fewer).
		res, err = flow.Report(ctx, steps{s.pool}, p)
	} else {
		err = s.inTx(ctx, func(tx pgx.Tx) (err error) {
			res, err = flow.Report(ctx, steps{tx}, p)
			return err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("delivery report: %w", interpretError(err))
	}
	return res, nil
}

func (s *Store) DeliveryAck(ctx context.Context, p *store.DeliveryAckParams) (int, error) {
	n, err := ack(ctx, s.pool, p, nil)
	if err != nil {
		return 0, fmt.Errorf("delivery ack: %w", interpretError(err))
	}
	return n, nil
}

func (s *Store) DeliveryExtend(ctx context.Context, p *store.DeliveryExtendParams) (int, error) {
	n, err := extend(ctx, s.pool, p)
	if err != nil {
		return 0, fmt.Errorf("delivery extend: %w", interpretError(err))
	}
	return n, nil
}

func (s *Store) DeliveryNack(ctx context.Context, p *store.DeliveryNackParams) (int, error) {
	return s.failing(ctx, "delivery nack", func(st steps) (int, error) { return flow.Nack(ctx, st, p) })
}

func (s *Store) DeliveryRelease(ctx context.Context, p *store.DeliveryReleaseParams) (int, error) {
	if len(p.IDs) == 0 {
		return 0, nil
	}
	return s.failing(ctx, "delivery release", func(st steps) (int, error) { return flow.Release(ctx, st, p) })
}

func (s *Store) DeliveryReleaseUnheld(ctx context.Context, p *store.DeliveryReleaseUnheldParams) (int, error) {
	return s.failing(ctx, "delivery release unheld", func(st steps) (int, error) { return flow.ReleaseUnheld(ctx, st, p) })
}

// failing runs fail, a flow that fails deliveries, in a transaction, and
// returns how many it failed.
func (s *Store) failing(ctx context.Context, what string, fail func(st steps) (int, error)) (int, error) {
	var n int
	err := s.inTx(ctx, func(tx pgx.Tx) (err error) {
		n, err = fail(steps{tx})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, interpretError(err))
	}
	return n, nil
}

// steps are a report's steps (flow.ReportSteps) on the pool, or in a
// transaction.
type steps struct{ q pgxQuerier }

var _ flow.ReportSteps = steps{}

func (st steps) Ack(ctx context.Context, p *store.DeliveryAckParams, results []store.DeliveryResult) (int, error) {
	return ack(ctx, st.q, p, results)
}

func (st steps) Extend(ctx context.Context, p *store.DeliveryExtendParams) (int, error) {
	return extend(ctx, st.q, p)
}

func (st steps) Transitionable(ctx context.Context, tr store.Transition, hostID string, ids []string) ([]store.Failing, error) {
	rows, err := st.q.Query(ctx, lockTransitionable, hostID, ids, statusNames(tr.From))
	if err != nil {
		return nil, err
	}
	return collectFailing(rows)
}

func (st steps) Unheld(ctx context.Context, hostID string, held []string) ([]store.Failing, error) {
	if held == nil {
		held = []string{} // NULL would match nothing
	}
	rows, err := st.q.Query(ctx, `
		SELECT `+flow.FailingColumns+` FROM deliveries
		WHERE host_id = $1 AND status = ANY($2) AND NOT (delivery_id = ANY($3))
		ORDER BY delivery_id
		FOR UPDATE`, hostID, statusNames(store.TransitionAnswerLost.From), held)
	if err != nil {
		return nil, err
	}
	return collectFailing(rows)
}

func (st steps) Fail(ctx context.Context, f store.Failing, fl store.Failure, now time.Time) (bool, error) {
	tag, err := st.q.Exec(ctx, `
		UPDATE deliveries
		SET status = $2, next_retry_at = $3, dlq_at = $4, lease_expires_at = NULL, last_error = $5, updated_at = $6,
			max_attempts = COALESCE($8::integer, max_attempts), host_id = COALESCE(NULLIF($9, ''), host_id)
		WHERE `+idIs("delivery_id", "$1")+` AND status = ANY($7)`,
		f.ID, string(fl.To), msPtr(fl.NextRetryAt), msPtr(fl.DLQAt), fl.LastError, ms(now), statusNames(fl.Transition.From),
		raisedMaxAttempts(fl), fl.MoveTo)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

func (st steps) RecordEvents(ctx context.Context, events []store.DeliveryEvent) error {
	return recordEvents(ctx, st.q, events)
}

func (st steps) Wake(ctx context.Context, hostID string) error {
	return notifyAvailable(ctx, st.q, hostID)
}

func (st steps) RecordResults(ctx context.Context, hostID string, results []store.DeliveryResult) error {
	return recordResults(ctx, st.q, hostID, results)
}

// raisedMaxAttempts is the max_attempts a failure writes: nil (NULL,
// kept) unless it raises it.
func raisedMaxAttempts(fl store.Failure) *int32 {
	if fl.MaxAttempts <= 0 {
		return nil
	}
	n := int32(fl.MaxAttempts)
	return &n
}

func (s *Store) DeliveryExpireLeases(ctx context.Context, p *store.DeliveryExpireLeasesParams) (int, error) {
	limit := store.LimitOr(p.Limit, flow.DefaultBatch)
	now := ms(p.Now)
	tr := store.TransitionExpire
	return s.failing(ctx, "delivery expire leases", func(st steps) (int, error) {
		rows, err := st.q.Query(ctx, `
			SELECT `+flow.FailingColumns+` FROM deliveries
			WHERE status = ANY($1) AND lease_expires_at < $2
			ORDER BY lease_expires_at, delivery_id
			LIMIT $3
			FOR UPDATE SKIP LOCKED`, statusNames(tr.From), now, limit)
		if err != nil {
			return 0, err
		}
		failing, err := collectFailing(rows)
		if err != nil {
			return 0, err
		}
		return flow.ApplyFailures(ctx, st, failing, p.Fail, now)
	})
}
