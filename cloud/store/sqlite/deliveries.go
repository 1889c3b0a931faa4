package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/flow"
	"github.com/relaykit/relay/shared/jsonwalk"
)

// bodyColumn reads a delivery's body beside flow.DeliveryColumns: bodies live in
// a table of their own, so that state changes do not rewrite them, in their
// stored form (see pack).
const bodyColumn = `(SELECT relay_body(body, codec) FROM delivery_bodies b WHERE b.id = deliveries.body_id)`

// bodiesOf reads the ids and stored bodies of the deliveries of the rowids
// in its one argument (rowidsArg).
var bodiesOf = `SELECT d.delivery_id, b.body, b.codec FROM deliveries d JOIN delivery_bodies b ON b.id = d.body_id
		WHERE ` + rowidsIn("d.rowid")

// rowidsIn matches the rows whose rowid col is among those of its one
// argument (rowidsArg): one text whatever their number, which the writer
// keeps prepared (stmtCache), where a list of placeholders made a text
// for each number of rows.
func rowidsIn(col string) string {
	return col + ` IN (SELECT value FROM json_each(?))`
}

// rowidsArg is rowidsIn's argument: the rowids as a JSON array.
func rowidsArg(rowids []int64) string { return jsonwalk.Ints(rowids) }

// readBodies fills in the bodies of ds, whose rowids are rowids (in any
// order), as stored: it returns those to unpack (see unpackBodies), which
// is left until the transaction is over so that the one writer does not
// wait on it. (relay_body in the query would also copy each body three
// more times between SQLite and Go.)
func readBodies(ctx context.Context, tx *txn, ds []*store.Delivery, rowids []int64) (packed []packedRead, err error) {
	byID := make(map[string]*store.Delivery, len(ds))
	for _, d := range ds {
		byID[d.ID] = d
		d.RawBody = []byte{}
	}
	rows, done, err := tx.queryKept(ctx, bodiesOf, rowidsArg(rowids))
	if err != nil {
		return nil, err
	}
	defer done()
	defer rows.Close()
	for rows.Next() {
		var id string
		var data []byte
		var codec int64
		if err := rows.Scan(&id, &data, &codec); err != nil {
			return nil, err
		}
		d := byID[id]
		if d == nil || data == nil {
			continue
		}
		d.RawBody = data
		if codec != codecRaw {
			packed = append(packed, packedRead{d, codec})
		}
	}
	return packed, rows.Err()
}

// packedRead is a delivery whose RawBody holds its body as stored, in codec's
// form.
type packedRead struct {
	d     *store.Delivery
	codec int64
}

// unpackBodies turns the bodies readBodies left packed into the webhooks'.
func unpackBodies(packed []packedRead) error {
	for _, p := range packed {
		body, err := unpack(p.d.RawBody, p.codec)
		if err != nil {
			return fmt.Errorf("delivery %s: %w", p.d.ID, err)
		}
		p.d.RawBody = body
	}
	return nil
}

// scanDelivery scans flow.DeliveryColumns, followed by the body when withBody.
func scanDelivery(row scanner, withBody bool) (*store.Delivery, error) {
	var d store.Delivery
	var headers string
	var delays *string
	dest := []any{&d.ID, &d.HostID, &d.Source, &d.EventID, &d.EventType, &d.EventAction, &headers, &d.BodySize,
		&d.Status, &d.Attempts, &d.MaxAttempts, &delays, nullTimeCol{&d.NextRetryAt}, nullTimeCol{&d.LeaseExpiresAt},
		&d.LastError, timeCol{&d.ReceivedAt}, nullTimeCol{&d.DeliveredAt}, nullTimeCol{&d.AckedAt},
		nullTimeCol{&d.DLQAt}, &d.CorrelationID, timeCol{&d.UpdatedAt}, &d.GroupID, &d.Lane}
	if withBody {
		dest = append(dest, &d.RawBody)
	}
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	var err error
	if d.Headers, err = jsonwalk.Strings([]byte(headers)); err != nil {
		return nil, fmt.Errorf("headers: %w", err)
	}
	if d.RetryDelays, err = store.DecodeDelays(delays); err != nil {
		return nil, err
	}
	if withBody && d.RawBody == nil {
		d.RawBody = []byte{}
	}
	return &d, nil
}

func scanDeliveryNoBody(row scanner) (*store.Delivery, error) { return scanDelivery(row, false) }

// idKey finds a delivery, or its audit events, by the delivery's id (two
// ?, both the id): the unique index of deliveries and the index of
// delivery_events are led by the id's last 13 characters, its received
// millisecond, so that new deliveries and events are appended (see
// migrations 12 and 16). A condition on delivery_id alone reads every row.
const idKey = `substr(delivery_id, -13) = substr(?, -13) AND delivery_id = ?`

// keyIs is idKey's condition for column col and an expression of an id
// (a column, a numbered parameter).
func keyIs(col, id string) string {
	return `substr(` + col + `, -13) = substr(` + id + `, -13) AND ` + col + ` = ` + id
}

// idsIn selects the deliveries among a list of ids, one ? holding them as
// a JSON array (idsArg), by rowid (the column rowid names, such as
// "rowid"): each id is looked up by its key (idKey). SQLite matches
// neither delivery_id IN (…) nor a row value IN (…) of the key's
// expression to the index; and one parameter, not one per id, keeps the
// statement the same for any number of ids, short to compile.
func idsIn(rowid string) string {
	return rowid + ` IN (SELECT byid.rowid FROM json_each(?) k
		CROSS JOIN deliveries byid ON ` + keyIs("byid.delivery_id", "k.value") + `)`
}

// idsArg is idsIn's argument for ids.
func idsArg(ids []string) any {
	b, err := json.Marshal(append([]string{}, ids...))
	if err != nil {
		panic(err) // strings always marshal
	}
	return string(b)
}

// recordEvents appends entries to the audit trail, each with its
// delivery's host and source as they are (the delivery was changed in the
// same transaction).
func recordEvents(ctx context.Context, tx *txn, events []store.DeliveryEvent) error {
	if len(events) == 0 {
		return nil
	}
	stmt, done, err := tx.prepared(ctx, recordEvent)
	if err != nil {
		return fmt.Errorf("record events: %w", err)
	}
	defer done()
	for _, e := range events {
		_, err := stmt.ExecContext(ctx, e.DeliveryID, dbTime(e.At), string(e.From), string(e.To), e.Reason, e.Attempt)
		if err != nil {
			return fmt.Errorf("record events: %w", err)
		}
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

// The intake's statements. The writer keeps them prepared (stmtCache), as
// it does every statement it runs: preparing four statements per batch was
// 1–2% of the cloud's CPU at 256 concurrent senders.
const (
	insertLookup = `SELECT ` + flow.DeliveryColumns + ` FROM deliveries
			WHERE host_id = ? AND source = ? AND event_id = ? AND group_id = ''`
	insertLookupGroup = `SELECT ` + flow.DeliveryColumns + ` FROM deliveries
			WHERE group_id = ? AND source = ? AND event_id = ? AND lane = ? AND group_id <> ''`
	insertDelivery = `
			INSERT INTO deliveries (delivery_id, host_id, source, event_id, event_type, event_action, headers,
				body_size, body_id, status, attempts, max_attempts, retry_delays_ms, lease_expires_at, received_at,
				correlation_id, updated_at, body_sha256, group_id, lane)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT DO NOTHING`
	// Bodies are keyed in arrival order (see migration 7): appended,
	// not written into an index at the random place of an event id.
	insertBody  = `INSERT INTO delivery_bodies (body, codec) VALUES (?, ?)`
	insertEvent = `INSERT INTO delivery_events (delivery_id, at, from_status, to_status, reason, attempt, host_id, source)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
)

// insertEvents writes eventsPerInsert audit events at once.
var insertEvents = `INSERT INTO delivery_events (delivery_id, at, from_status, to_status, reason, attempt, host_id, source)
			VALUES ` + strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?), ", eventsPerInsert), ", ")

// recordEvent writes an audit event of a stored delivery (?1) with the
// delivery's host and source.
var recordEvent = `INSERT INTO delivery_events (delivery_id, at, from_status, to_status, reason, attempt, host_id, source)
	SELECT ?1, ?2, ?3, ?4, ?5, ?6, d.host_id, d.source
	FROM (SELECT 1) LEFT JOIN deliveries d ON ` + keyIs("d.delivery_id", "?1")

// ownedEvent is an audit event with its delivery's host and source, as
// the intake writes those of the deliveries it stores.
type ownedEvent struct {
	store.DeliveryEvent
	hostID, source string
}

// eventsPerInsert is how many audit events insertEvents writes at once: a
// batch's "received" events go in statements of that many rows (the rest
// one by one), not one statement per webhook.
const eventsPerInsert = 16

// DeliveryInsertBatch writes the batch in one transaction on the one
// writer connection, so look-ups and inserts cannot race.
func (s *Store) DeliveryInsertBatch(ctx context.Context, ps []*store.DeliveryInsertParams) ([]*store.DeliveryInsertResult, error) {
	rows, order, err := store.PrepareInserts(ps)
	if err != nil {
		return nil, err
	}
	results := make([]*store.DeliveryInsertResult, len(ps))
	err = s.inTx(ctx, func(tx *txn) error {
		insert, done, err := tx.prepared(ctx, insertDelivery)
		if err != nil {
			return err
		}
		defer done()
		insertBody, done, err := tx.prepared(ctx, insertBody)
		if err != nil {
			return err
		}
		defer done()
		received := make([]ownedEvent, 0, len(ps))
		// A fanout's deliveries share the body the first of them stored
		// (their own in this transaction: a failed batch is retried one
		// insert at a time), kept only if one of them was new.
		shared := map[*store.BodyShare]*sharedBody{}
		for _, i := range order {
			r := &rows[i]
			now := ms(r.ReceivedAt)
			var bodyID int64
			sb := shared[r.Share]
			if sb == nil {
				data, codec := packedOf(r)
				res, err := insertBody.ExecContext(ctx, data, codec)
				if err != nil {
					return err
				}
				if bodyID, err = res.LastInsertId(); err != nil {
					return err
				}
				if r.Share != nil {
					sb = &sharedBody{id: bodyID}
					shared[r.Share] = sb
				}
			} else {
				bodyID = sb.id
			}
			// Most events are new: the insert itself finds out, through
			// the dedupe key's index it writes anyway, and the delivery is
			// looked up only when a key is taken (looking every event up
			// first was a quarter of the batch's CPU). Either key may be:
			// the event's (a repeat, answered from the delivery stored),
			// or only the delivery id (another host's delivery of the same
			// event under the same source name, received in the same
			// millisecond), which moves on a millisecond. No conflict
			// target is named: the delivery id's index is on an expression
			// (see idKey).
			var repeat *store.DeliveryInsertResult
			for round := 0; ; round++ {
				res, err := insert.ExecContext(ctx,
					r.ID, r.HostID, r.Source, r.EventID, r.EventType, r.EventAction, r.HeadersJSON,
					len(r.Body), bodyID, string(r.Status()), r.Attempts(), r.MaxAttempts, r.Delays,
					dbTimePtr(r.LeaseUntil(now)), dbTime(now), r.CorrelationID, dbTime(now), digestOrNull(r.BodyDigest),
					r.GroupID, r.Lane)
				if err != nil {
					return err
				}
				n, err := res.RowsAffected()
				if err != nil {
					return err
				}
				if n == 1 {
					if sb != nil {
						sb.used = true
					}
					break
				}
				var row scanner
				if r.GroupID != "" {
					row = tx.queryRowKept(ctx, insertLookupGroup, r.GroupID, r.Source, r.EventID, r.Lane)
				} else {
					row = tx.queryRowKept(ctx, insertLookup, r.HostID, r.Source, r.EventID)
				}
				existing, err := scanDelivery(row, false)
				if err == nil {
					if r.Share == nil {
						if _, err := tx.ExecContext(ctx, `DELETE FROM delivery_bodies WHERE id = ?`, bodyID); err != nil {
							return err
						}
					}
					if repeat, err = revive(ctx, tx, existing, now); err != nil {
						return err
					}
					break
				}
				if !errors.Is(err, sql.ErrNoRows) {
					return err
				}
				if round == store.MaxInsertRounds {
					return fmt.Errorf("%w: delivery id %s", store.ErrConflict, r.ID)
				}
				store.MoveOn(rows, []int{i})
				now = ms(r.ReceivedAt)
			}
			if repeat != nil {
				results[i] = repeat
				continue
			}
			d := r.Inserted(now) // what was written need not be read back
			results[i] = &store.DeliveryInsertResult{Delivery: d, Outcome: store.InsertQueued}
			if r.ReplayOf != nil {
				if err := noteReplay(ctx, tx, r.ReplayOf, now); err != nil {
					return err
				}
			}
			for _, e := range r.Events(now) {
				received = append(received, ownedEvent{e, r.HostID, r.Source})
			}
		}
		for _, sb := range shared {
			if !sb.used {
				if _, err := tx.ExecContext(ctx, `DELETE FROM delivery_bodies WHERE id = ?`, sb.id); err != nil {
					return err
				}
			}
		}
		return insertReceived(ctx, tx, received)
	})
	if err != nil {
		return nil, fmt.Errorf("delivery insert: %w", interpretError(err))
	}
	woken := map[string]bool{}
	for _, res := range results {
		// One leased as it was stored is not available: its connection
		// pushes it.
		available := res.Outcome != store.InsertDuplicate && res.Delivery.Status != store.TransitionLease.To
		if available && !woken[res.Delivery.HostID] {
			woken[res.Delivery.HostID] = true
			s.wake.notify(res.Delivery.HostID)
		}
	}
	return results, nil
}

// sharedBody is the body a fanout's deliveries share in one batch, and
// whether one of them was stored new with it.
type sharedBody struct {
	id   int64
	used bool
}

// noteReplay records a replay's note in the audit trail of the delivery it
// replays (its status and attempts as they are), if that one is still
// stored.
func noteReplay(ctx context.Context, tx *txn, of *store.ReplayOf, at time.Time) error {
	_, err := tx.ExecContext(ctx, `
		INSERT INTO delivery_events (delivery_id, at, from_status, to_status, reason, attempt, host_id, source)
		SELECT delivery_id, ?, status, status, ?, attempts, host_id, source FROM deliveries WHERE `+ofHost,
		dbTime(at), of.Note, of.ID, of.ID, of.HostID)
	if err != nil {
		return fmt.Errorf("replay note: %w", err)
	}
	return nil
}

// insertReceived writes the audit events of a batch's new deliveries, in
// order: eventsPerInsert at a time, the rest one by one.
func insertReceived(ctx context.Context, tx *txn, events []ownedEvent) error {
	args := func(evs []ownedEvent) []any {
		out := make([]any, 0, 8*len(evs))
		for _, e := range evs {
			out = append(out, e.DeliveryID, dbTime(e.At), string(e.From), string(e.To), e.Reason, e.Attempt, e.hostID, e.source)
		}
		return out
	}
	if len(events) >= eventsPerInsert {
		many, done, err := tx.prepared(ctx, insertEvents)
		if err != nil {
			return fmt.Errorf("record events: %w", err)
		}
		defer done()
		for len(events) >= eventsPerInsert {
			if _, err := many.ExecContext(ctx, args(events[:eventsPerInsert])...); err != nil {
				return fmt.Errorf("record events: %w", err)
			}
			events = events[eventsPerInsert:]
		}
	}
	if len(events) > 0 {
		one, done, err := tx.prepared(ctx, insertEvent)
		if err != nil {
			return fmt.Errorf("record events: %w", err)
		}
		defer done()
		for _, e := range events {
			if _, err := one.ExecContext(ctx, args([]ownedEvent{e})...); err != nil {
				return fmt.Errorf("record events: %w", err)
			}
		}
	}
	return nil
}

// revive answers a repeat of an existing delivery: a dead-lettered one goes
// back to the queue with its attempts reset, any other is a duplicate.
func revive(ctx context.Context, tx *txn, existing *store.Delivery, now time.Time) (*store.DeliveryInsertResult, error) {
	if !store.TransitionRevive.Allows(existing.Status) {
		return &store.DeliveryInsertResult{Delivery: existing, Outcome: store.InsertDuplicate}, nil
	}
	d, err := requeue(ctx, tx, store.TransitionRevive, existing, now)
	if err != nil {
		return nil, err
	}
	return &store.DeliveryInsertResult{Delivery: d, Outcome: store.InsertRevived}, nil
}

// requeueQuery sets the delivery (its id twice) back to the queue if tr
// allows its status (the statuses follow).
func requeueQuery(tr store.Transition) string {
	return `UPDATE deliveries
		SET status = ?, attempts = 0, max_attempts = ?, next_retry_at = NULL, lease_expires_at = NULL, dlq_at = NULL,
			last_error = '', updated_at = ?
		WHERE ` + idKey + ` AND status IN (` + placeholders(len(tr.From)) + `)
		RETURNING ` + flow.DeliveryColumns
}

// handBacksSinceRequeue counts a delivery's hand-backs since it was last
// requeued (store.RequeueMaxAttempts): its audit events with the
// hand-back's reason after the latest with a requeue's.
// Both read the trail's own index by its key (idKey: the id twice each).
var handBacksSinceRequeue = `SELECT count(*) FROM delivery_events
	WHERE ` + idKey + ` AND reason = ? AND id > (SELECT coalesce(max(id), 0) FROM delivery_events
		WHERE ` + idKey + ` AND reason IN (` + placeholders(len(store.Requeued)) + `))`

// requeue applies tr (revive or retry) to a delivery read in this
// transaction: back to the queue, attempts reset and the attempts budget
// it was stored with, with an audit event.
func requeue(ctx context.Context, tx *txn, tr store.Transition, existing *store.Delivery, now time.Time) (*store.Delivery, error) {
	args := []any{existing.ID, existing.ID, store.TransitionHandBack.Reason, existing.ID, existing.ID}
	for _, r := range store.Requeued {
		args = append(args, r.Reason)
	}
	var handBacks int
	if err := tx.QueryRowContext(ctx, handBacksSinceRequeue, args...).Scan(&handBacks); err != nil {
		return nil, err
	}
	d, err := scanDelivery(tx.QueryRowContext(ctx, requeueQuery(tr),
		append([]any{string(tr.To), store.RequeueMaxAttempts(existing.MaxAttempts, handBacks), dbTime(now), existing.ID, existing.ID},
			statusArgs(tr.From)...)...), false)
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

// ofHost finds a delivery of a host by its id (three ?: the id twice, the
// host). The host is no index's lead (+): the key finds the one row.
const ofHost = idKey + ` AND +host_id = ?`

func (s *Store) DeliveryRetry(ctx context.Context, p *store.DeliveryRetryParams) (*store.Delivery, error) {
	now := ms(p.Now)
	tr := store.TransitionRetry
	var d *store.Delivery
	err := s.inTx(ctx, func(tx *txn) error {
		existing, err := scanDelivery(tx.QueryRowContext(ctx, `SELECT `+flow.DeliveryColumns+` FROM deliveries WHERE `+ofHost,
			p.ID, p.ID, p.HostID), false)
		if err != nil {
			return err
		}
		if !tr.Allows(existing.Status) {
			return &store.TransitionError{DeliveryID: existing.ID, Status: existing.Status, Transition: tr}
		}
		d, err = requeue(ctx, tx, tr, existing, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("delivery retry: %w", interpretError(err))
	}
	s.wake.notify(p.HostID)
	return d, nil
}

func (s *Store) DeliveryGet(ctx context.Context, hostID, id string) (*store.Delivery, error) {
	d, err := scanDelivery(s.read.QueryRowContext(ctx, `
		SELECT `+flow.DeliveryColumns+`, `+bodyColumn+` FROM deliveries WHERE `+ofHost,
		id, id, hostID), true)
	if err != nil {
		return nil, fmt.Errorf("delivery get: %w", interpretError(err))
	}
	return d, nil
}

func (s *Store) DeliveryList(ctx context.Context, p *store.DeliveryListParams) ([]*store.Delivery, error) {
	q, args := listQuery(p)
	list, err := queryAll(ctx, s.read, scanDeliveryNoBody, q, args...)
	if err != nil {
		return nil, fmt.Errorf("delivery list: %w", err)
	}
	return list, nil
}

// listQuery is DeliveryList's query: a host's deliveries, newest first,
// with a condition for each filter given and none for those left empty.
// Written as one statement whose filters hold for an empty parameter
// (status = ?2 OR ?2 is empty), it matched no index but the host's: the
// host's deliveries in one status were found by walking every delivery
// the host has kept, newest first: 0.25-0.35 s for a page of dead letters
// older than the host's last 250,000 deliveries. Written out, a status
// reads deliveries_host_status_idx, in order.
func listQuery(p *store.DeliveryListParams) (string, []any) {
	where, args := []string{"host_id = ?"}, []any{p.HostID}
	if p.Status != "" {
		where, args = append(where, "status = ?"), append(args, string(p.Status))
	}
	if p.Source != "" {
		where, args = append(where, "source = ?"), append(args, p.Source)
	}
	if p.BeforeReceivedAt != nil {
		where, args = append(where, "(received_at, delivery_id) < (?, ?)"), append(args, dbTime(*p.BeforeReceivedAt), p.BeforeID)
	}
	return `SELECT ` + flow.DeliveryColumns + ` FROM deliveries WHERE ` + strings.Join(where, " AND ") + `
		ORDER BY received_at DESC, delivery_id DESC LIMIT ?`, append(args, store.LimitOr(p.Limit, flow.DefaultListLimit))
}

func (s *Store) DeliveryEventList(ctx context.Context, deliveryID string) ([]*store.DeliveryEvent, error) {
	events, err := queryAll(ctx, s.read, func(r scanner) (*store.DeliveryEvent, error) {
		var e store.DeliveryEvent
		err := r.Scan(&e.ID, &e.DeliveryID, timeCol{&e.At}, &e.From, &e.To, &e.Reason, &e.Attempt)
		return &e, err
	}, `
		SELECT id, delivery_id, at, from_status, to_status, reason, attempt
		FROM delivery_events WHERE `+idKey+` ORDER BY id`, deliveryID, deliveryID)
	if err != nil {
		return nil, fmt.Errorf("delivery event list: %w", err)
	}
	return events, nil
}

// leaseCandidates lists a host's available deliveries, oldest first. The
// partial index holds only available deliveries: without it (the planner's
// pick on an unanalyzed database) a lease walks every delivery the host
// ever had.
const leaseCandidates = `
	SELECT rowid, status, body_size FROM deliveries INDEXED BY deliveries_available_idx
	WHERE host_id = ? AND status IN ('queued', 'retrying')
		AND (status = 'queued' OR (status = 'retrying' AND next_retry_at <= ?))
	ORDER BY received_at, delivery_id
	LIMIT ?`

// leaseAny finds whether leaseCandidates would find any.
const leaseAny = `
	SELECT 1 FROM deliveries INDEXED BY deliveries_available_idx
	WHERE host_id = ? AND status IN ('queued', 'retrying')
		AND (status = 'queued' OR (status = 'retrying' AND next_retry_at <= ?))
	LIMIT 1`

func (s *Store) DeliveryLease(ctx context.Context, p *store.DeliveryLeaseParams) (*store.DeliveryLeaseResult, error) {
	max := p.Max
	if max <= 0 {
		max = flow.DefaultLeaseMax
	}
	now := ms(p.Now)
	leaseUntil := ms(p.Now.Add(p.LeaseFor))
	tr := store.LeaseOn(p.Via)

	// Most leases find nothing (a long poll or a push loop looking before
	// it waits): a read says so without taking the write lock, which the
	// intake and every report wait for. A delivery committed after the
	// read wakes the caller, who subscribed before it looked.
	var found int
	err := s.read.QueryRowContext(ctx, leaseAny, p.HostID, dbTime(now)).Scan(&found)
	if errors.Is(err, sql.ErrNoRows) {
		return &store.DeliveryLeaseResult{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("delivery lease: %w", interpretError(err))
	}

	var leased []*store.Delivery
	var packed []packedRead
	var more bool
	err = s.inTx(ctx, func(tx *txn) error {
		// The writer transaction holds SQLite's write lock from BEGIN
		// IMMEDIATE on, so no other lease can interleave. One candidate more
		// than fits says whether work is left over.
		type candidate struct {
			rowid  int64
			status store.Status
			size   int
		}
		cands, err := queryAll(ctx, tx, func(r scanner) (candidate, error) {
			var c candidate
			err := r.Scan(&c.rowid, &c.status, &c.size)
			return c, err
		}, leaseCandidates, p.HostID, dbTime(now), max+1)
		if err != nil {
			return err
		}
		sizes := make([]int, len(cands))
		for i, c := range cands {
			sizes[i] = c.size
		}
		cut := store.LeaseCut(sizes, max, p.MaxBytes)
		more = cut < len(cands)
		cands = cands[:cut]
		if len(cands) == 0 {
			return nil
		}
		// The candidates are found again by rowid, the table's own key.
		rowids := make([]int64, len(cands))
		for i, c := range cands {
			rowids[i] = c.rowid
		}
		guard := rowidsIn("rowid") + ` AND status IN (` + placeholders(len(tr.From)) + `)`
		guardArgs := append([]any{rowidsArg(rowids)}, statusArgs(tr.From)...)
		// The audit events first, from the rows as they are before the
		// update: their attempt is the one the lease starts.
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO delivery_events (delivery_id, at, from_status, to_status, reason, attempt, host_id, source)
			SELECT delivery_id, ?, status, ?, ?, attempts + 1, host_id, source FROM deliveries
			WHERE `+guard+` ORDER BY received_at, delivery_id`,
			append([]any{dbTime(now), string(tr.To), tr.Reason}, guardArgs...)...); err != nil {
			return err
		}
		leased, err = queryAll(ctx, tx, scanDeliveryNoBody, `
			UPDATE deliveries
			SET status = ?, attempts = attempts + 1, lease_expires_at = ?, next_retry_at = NULL, updated_at = ?
			WHERE `+guard+`
			RETURNING `+flow.DeliveryColumns, append([]any{string(tr.To), dbTime(leaseUntil), dbTime(now)}, guardArgs...)...)
		if err != nil {
			return err
		}
		if packed, err = readBodies(ctx, tx, leased, rowids); err != nil {
			return err
		}
		flow.InLeaseOrder(leased)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("delivery lease: %w", interpretError(err))
	}
	// A body that cannot be unpacked (damaged on disk) fails the lease,
	// whose deliveries come back when it runs out: never other bytes.
	if err := unpackBodies(packed); err != nil {
		return nil, fmt.Errorf("delivery lease: %w", err)
	}
	return &store.DeliveryLeaseResult{Deliveries: leased, More: more}, nil
}

// scanFailing reads flow.FailingColumns: a delivery whose attempt is failing, as
// the delivery core decides from.
func scanFailing(r scanner) (store.Failing, error) {
	var f store.Failing
	var delays *string
	if err := r.Scan(&f.ID, &f.HostID, &f.Status, &f.Attempts, &f.MaxAttempts, &delays, &f.GroupID, &f.Lane); err != nil {
		return f, err
	}
	var err error
	f.RetryDelays, err = store.DecodeDelays(delays)
	return f, err
}

// transitionable is the condition, and its arguments, that selects the
// host's deliveries among ids whose status tr allows. The ids are looked
// up by key: the unary + keeps SQLite, which has no statistics, from
// walking instead the host's deliveries in each status tr allows
// (deliveries_host_status_idx) — every delivery in flight, for each
// batch an update moves on, which cost a draining cloud more CPU than
// the updates themselves.
func transitionable(tr store.Transition, hostID string, ids []string) (string, []any) {
	return idsIn("rowid") + ` AND +host_id = ? AND +status IN (` + placeholders(len(tr.From)) + `)`,
		append([]any{idsArg(ids), hostID}, statusArgs(tr.From)...)
}

// selectForTransition reads the host's deliveries among ids whose status tr
// allows.
func selectForTransition(ctx context.Context, tx *txn, tr store.Transition, hostID string, ids []string) ([]store.Failing, error) {
	guard, args := transitionable(tr, hostID, ids)
	return queryAll(ctx, tx, scanFailing, `SELECT `+flow.FailingColumns+` FROM deliveries WHERE `+guard+` ORDER BY delivery_id`, args...)
}

// transition applies tr to the host's deliveries among ids that it allows:
// one update guarded on the current status, setting status to tr.To (kept
// when tr.To is empty) plus the columns in set, whose parameters (?1, ?2,
// …) come first. Each changed delivery gets an audit event, written by one
// statement from the rows as they are before the update (the writer's
// transaction holds them). A delivery among written still delivering is
// recorded delivered first (delivered_at and its own event, at its write
// time) by the same update.
func transition(ctx context.Context, tx *txn, tr store.Transition, hostID string, ids []string, written []store.Written, now time.Time, set string, setArgs ...any) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	// The ids are looked up by key once; the audit and the update find
	// the rows again by rowid, the table's own key.
	guard, guardArgs := transitionable(tr, hostID, ids)
	rows, err := queryAll(ctx, tx, func(r scanner) (heldRow, error) {
		var x heldRow
		err := r.Scan(&x.rowid, &x.id, &x.status)
		return x, err
	}, `SELECT rowid, delivery_id, status FROM deliveries WHERE `+guard, guardArgs...)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	rowids := make([]int64, len(rows))
	for i, x := range rows {
		rowids[i] = x.rowid
	}
	guard, guardArg := rowidsIn("rowid"), rowidsArg(rowids)
	fromStatus := `status`
	var fromArgs []any
	if folded := writtenDelivering(rows, written); len(folded) > 0 {
		// Their delivered events first, one statement per write time;
		// then the transition's own events say they come from delivered.
		var all []int64
		cases := `CASE`
		for _, g := range folded {
			if _, err := tx.ExecContext(ctx, `
				INSERT INTO delivery_events (delivery_id, at, from_status, to_status, reason, attempt, host_id, source)
				SELECT delivery_id, ?, status, ?, ?, attempts, host_id, source FROM deliveries
				WHERE `+rowidsIn("rowid")+` ORDER BY delivery_id`,
				dbTime(g.at), string(store.StatusDelivered), store.TransitionDelivered.Reason, rowidsArg(g.rowids)); err != nil {
				return 0, err
			}
			all = append(all, g.rowids...)
			cases += ` WHEN ` + rowidsIn("rowid") + ` THEN ?`
			setArgs = append(setArgs, rowidsArg(g.rowids), dbTime(g.at))
		}
		set += `, delivered_at = ` + cases + ` ELSE delivered_at END`
		fromStatus = `CASE WHEN ` + rowidsIn("rowid") + ` THEN '` + string(store.StatusDelivered) + `' ELSE status END`
		fromArgs = []any{rowidsArg(all)}
	}
	res, err := tx.ExecContext(ctx, `
		INSERT INTO delivery_events (delivery_id, at, from_status, to_status, reason, attempt, host_id, source)
		SELECT delivery_id, ?, `+fromStatus+`, COALESCE(NULLIF(?, ''), status), ?, attempts, host_id, source FROM deliveries
		WHERE `+guard+` ORDER BY delivery_id`,
		append(append([]any{dbTime(now)}, fromArgs...), string(tr.To), tr.Reason, guardArg)...)
	if err != nil {
		return 0, err
	}
	changed, err := res.RowsAffected()
	if err != nil || changed == 0 {
		return 0, err
	}
	args := append(append([]any{}, setArgs...), string(tr.To), guardArg)
	if _, err := tx.ExecContext(ctx, `
		UPDATE deliveries SET `+set+`, status = COALESCE(NULLIF(?, ''), status)
		WHERE `+guard, args...); err != nil {
		return 0, err
	}
	return int(changed), nil
}

// heldRow is a row a transition holds.
type heldRow struct {
	rowid      int64
	id, status string
}

// writtenGroup is the rows of deliveries written at one time.
type writtenGroup struct {
	at     time.Time
	rowids []int64
}

// writtenDelivering picks, among the rows a transition holds, the ones
// still delivering that written lists, grouped by their write time in the
// order written gives them.
func writtenDelivering(rows []heldRow, written []store.Written) []writtenGroup {
	if len(written) == 0 {
		return nil
	}
	at := make(map[string]time.Time, len(written))
	for _, w := range written {
		at[w.ID] = ms(w.At)
	}
	var groups []writtenGroup
	index := map[time.Time]int{}
	for _, r := range rows {
		t, ok := at[r.id]
		if !ok || r.status != string(store.StatusDelivering) {
			continue
		}
		i, ok := index[t]
		if !ok {
			i = len(groups)
			index[t] = i
			groups = append(groups, writtenGroup{at: t})
		}
		groups[i].rowids = append(groups[i].rowids, r.rowid)
	}
	return groups
}

func (s *Store) DeliveryMarkDelivered(ctx context.Context, p *store.DeliveryMarkDeliveredParams) (int, error) {
	if len(p.IDs) == 0 {
		return 0, nil
	}
	var n int
	err := s.inTx(ctx, func(tx *txn) (err error) {
		n, err = markDelivered(ctx, tx, p.HostID, p.IDs, p.Now)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("delivery mark delivered: %w", interpretError(err))
	}
	return n, nil
}

func markDelivered(ctx context.Context, tx *txn, hostID string, ids []string, at time.Time) (int, error) {
	at = ms(at)
	return transition(ctx, tx, store.TransitionDelivered, hostID, ids, nil, at,
		`delivered_at = ?1, updated_at = ?1`, dbTime(at))
}

func ack(ctx context.Context, tx *txn, p *store.DeliveryAckParams) (int, error) {
	now := ms(p.Now)
	return transition(ctx, tx, store.TransitionAck, p.HostID, p.IDs, p.Written, now,
		`acked_at = ?1, updated_at = ?1, lease_expires_at = NULL, next_retry_at = NULL`, dbTime(now))
}

func extend(ctx context.Context, tx *txn, p *store.DeliveryExtendParams) (int, error) {
	now := ms(p.Now)
	return transition(ctx, tx, store.TransitionExtend, p.HostID, p.IDs, nil, now,
		`lease_expires_at = ?1, updated_at = ?2`, dbTime(p.Now.Add(p.LeaseFor)), dbTime(now))
}

// inReport runs fn with a report's steps in one writer transaction and,
// once it has committed, wakes the waiting heartbeats of the hosts the
// steps woke: their deliveries are due again at once.
func (s *Store) inReport(ctx context.Context, fn func(st steps) error) error {
	var woken map[string]bool
	err := s.inTx(ctx, func(tx *txn) error {
		woken = map[string]bool{}
		return fn(steps{tx, woken})
	})
	if err != nil {
		return err
	}
	for hostID := range woken {
		s.wake.notify(hostID)
	}
	return nil
}

// failing runs fail, a flow that fails deliveries, in a report's
// transaction (inReport), and returns how many it failed.
func (s *Store) failing(ctx context.Context, what string, fail func(st steps) (int, error)) (int, error) {
	var n int
	err := s.inReport(ctx, func(st steps) (err error) {
		n, err = fail(st)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, interpretError(err))
	}
	return n, nil
}

func (s *Store) DeliveryReport(ctx context.Context, p *store.DeliveryReportParams) (*store.DeliveryReportResult, error) {
	var res *store.DeliveryReportResult
	err := s.inReport(ctx, func(st steps) (err error) {
		res, err = flow.Report(ctx, st, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("delivery report: %w", interpretError(err))
	}
	return res, nil
}

func (s *Store) DeliveryAck(ctx context.Context, p *store.DeliveryAckParams) (int, error) {
	var n int
	err := s.inTx(ctx, func(tx *txn) (err error) {
		n, err = ack(ctx, tx, p)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("delivery ack: %w", interpretError(err))
	}
	return n, nil
}

func (s *Store) DeliveryExtend(ctx context.Context, p *store.DeliveryExtendParams) (int, error) {
	var n int
	err := s.inTx(ctx, func(tx *txn) (err error) {
		n, err = extend(ctx, tx, p)
		return err
	})
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

// steps are a report's steps (flow.ReportSteps) in a writer transaction;
// the hosts woken are woken once it commits (inReport).
type steps struct {
	tx    *txn
	woken map[string]bool
}

var _ flow.ReportSteps = steps{}

// Ack acks, then records the results of the deliveries it names: they
// are kept in a table of their own (delivery_results).
func (st steps) Ack(ctx context.Context, p *store.DeliveryAckParams, results []store.DeliveryResult) (int, error) {
	n, err := ack(ctx, st.tx, p)
	if err != nil {
		return 0, err
	}
	return n, recordResults(ctx, st.tx, p.HostID, results)
}

func (st steps) Extend(ctx context.Context, p *store.DeliveryExtendParams) (int, error) {
	return extend(ctx, st.tx, p)
}

func (st steps) Transitionable(ctx context.Context, tr store.Transition, hostID string, ids []string) ([]store.Failing, error) {
	return selectForTransition(ctx, st.tx, tr, hostID, ids)
}

func (st steps) Unheld(ctx context.Context, hostID string, held []string) ([]store.Failing, error) {
	tr := store.TransitionAnswerLost
	// Held goes in as one JSON array (never null): it may list thousands of ids.
	list, err := json.Marshal(append([]string{}, held...))
	if err != nil {
		return nil, err
	}
	args := append([]any{hostID}, statusArgs(tr.From)...)
	return queryAll(ctx, st.tx, scanFailing, `
		SELECT `+flow.FailingColumns+` FROM deliveries
		WHERE host_id = ? AND status IN (`+placeholders(len(tr.From))+`)
			AND delivery_id NOT IN (SELECT value FROM json_each(?))
		ORDER BY delivery_id`, append(args, string(list))...)
}

func (st steps) Fail(ctx context.Context, f store.Failing, fl store.Failure, now time.Time) (bool, error) {
	args := append([]any{string(fl.To), dbTimePtr(fl.NextRetryAt), dbTimePtr(fl.DLQAt), fl.LastError, dbTime(now),
		raisedMaxAttempts(fl), fl.MoveTo, f.ID, f.ID}, statusArgs(fl.Transition.From)...)
	res, err := st.tx.ExecContext(ctx, failQuery(fl.Transition), args...)
	if err != nil {
		return false, err
	}
	changed, err := res.RowsAffected()
	return changed > 0, err
}

func (st steps) RecordEvents(ctx context.Context, events []store.DeliveryEvent) error {
	return recordEvents(ctx, st.tx, events)
}

func (st steps) Wake(_ context.Context, hostID string) error {
	st.woken[hostID] = true
	return nil
}

func (st steps) RecordResults(ctx context.Context, hostID string, results []store.DeliveryResult) error {
	return recordResults(ctx, st.tx, hostID, results)
}

// failQuery applies a failure's transition tr to a delivery (its id
// twice) in a status tr allows (the statuses follow). max_attempts is
// kept when its parameter is NULL (every failure but a hand-back), the
// holder when its parameter is empty (every failure but a group's any
// delivery handed to another member).
func failQuery(tr store.Transition) string {
	return `UPDATE deliveries
		SET status = ?, next_retry_at = ?, dlq_at = ?, lease_expires_at = NULL, last_error = ?, updated_at = ?,
			max_attempts = COALESCE(?, max_attempts), host_id = COALESCE(NULLIF(?, ''), host_id)
		WHERE ` + idKey + ` AND status IN (` + placeholders(len(tr.From)) + `)`
}

// raisedMaxAttempts is the max_attempts a failure writes: nil (NULL,
// kept) unless it raises it.
func raisedMaxAttempts(fl store.Failure) any {
	if fl.MaxAttempts <= 0 {
		return nil
	}
	return fl.MaxAttempts
}

func (s *Store) DeliveryExpireLeases(ctx context.Context, p *store.DeliveryExpireLeasesParams) (int, error) {
	limit := store.LimitOr(p.Limit, flow.DefaultBatch)
	now := ms(p.Now)
	tr := store.TransitionExpire
	return s.failing(ctx, "delivery expire leases", func(st steps) (int, error) {
		// The statuses are written into the statement, not bound: only
		// then can SQLite tell that the partial index of leases
		// (deliveries_lease_idx, on exactly these statuses) holds every
		// row it wants. Bound, it scanned the whole table every second.
		failing, err := queryAll(ctx, st.tx, scanFailing, `
			SELECT `+flow.FailingColumns+` FROM deliveries
			WHERE status IN (`+statusList(tr.From)+`) AND lease_expires_at < ?
			ORDER BY lease_expires_at, delivery_id
			LIMIT ?`, dbTime(now), limit)
		if err != nil {
			return 0, err
		}
		return flow.ApplyFailures(ctx, st, failing, p.Fail, now)
	})
}

// statusList is statuses as SQL literals, for a statement that must name
// them itself (a partial index's condition is matched only against
// literals). Statuses are the store's constants, never input.
func statusList(statuses []store.Status) string {
	out := make([]string, len(statuses))
	for i, s := range statuses {
		if strings.Trim(string(s), "abcdefghijklmnopqrstuvwxyz_") != "" {
			panic(fmt.Sprintf("sqlite: status %q is no identifier", s))
		}
		out[i] = "'" + string(s) + "'"
	}
	return strings.Join(out, ", ")
}

// digestOrNull is a body digest as stored: NULL for none (unguarded
// sources), so that the partial index holds the guarded deliveries alone.
func digestOrNull(d []byte) any {
	if d == nil {
		return nil
	}
	return d
}
