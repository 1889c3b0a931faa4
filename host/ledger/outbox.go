package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"
)

// OutboxKind says whether an outbox entry is an ack or a nack.
type OutboxKind string

// Outbox kinds.
const (
	OutboxAck  OutboxKind = "ack"
	OutboxNack OutboxKind = "nack"
)

// OutboxEntry is an outcome waiting to be reported in a heartbeat. Seq
// identifies this very entry: a later outcome for the same delivery replaces
// it under a new Seq.
type OutboxEntry struct {
	Seq        int64
	DeliveryID string
	Kind       OutboxKind
	Error      string
	Retryable  bool
	Attempt    int // the cloud's attempt a nack reports (0: unknown)
	// NotStarted: a nack handing back a webhook whose handler never
	// started (the host was stopping).
	NotStarted bool
	CreatedAt  time.Time
	// Ran is the ledger's record of the delivery's last handler run, read
	// with the entry by OutboxList; nil when the ledger has none (a nack of
	// a webhook never started).
	Ran *RunResult
}

// RunResult is what the ledger recorded of a handler run, as the host
// reports it to the cloud.
type RunResult struct {
	Result         Result
	Attempt        int // the cloud's attempt of the run
	Handler        string
	ResponseStatus *int
	ExitCode       *int
	DurationMS     int64
	Error          string
}

// The outbox: outcomes recorded and not yet reported to the cloud. The table
// is the durable copy; a writable ledger also holds its pending entries in
// memory (pending), changed by the writer after each commit, so that the
// reports, which list the outbox before every send, do not read the table.
// Only the ledger's own writer changes the table (a read-only ledger, as the
// ledger commands open, lists it from the table).

// OutboxEnqueue queues an outcome on its own, replacing a pending entry of the
// same delivery. It is used to ack again a delivery the ledger already holds.
// Like DeliveryRecord, concurrent calls share one transaction.
func (l *Ledger) OutboxEnqueue(ctx context.Context, ob OutboxEntry) error {
	if ob.Kind != OutboxAck && ob.Kind != OutboxNack {
		return fmt.Errorf("enqueue %s for %q: invalid outbox kind %q", ob.Kind, ob.DeliveryID, ob.Kind)
	}
	if err := l.submit(ctx, &op{kind: opEnqueue, ob: ob}); err != nil {
		return fmt.Errorf("enqueue %s for %q: %w", ob.Kind, ob.DeliveryID, err)
	}
	return nil
}

// outboxListQuery lists the outbox, oldest first, each entry with its
// ledger row's outcome when it has one.
const outboxListQuery = `SELECT o.seq, o.delivery_id, o.kind, o.error, o.retryable, o.attempt, o.not_started, o.created_at,
		l.result, l.cloud_attempt, l.handler, l.response_status, l.exit_code, l.duration_ms, l.error
	FROM outbox o LEFT JOIN ledger l ON substr(l.delivery_id, -13) = substr(o.delivery_id, -13) AND l.delivery_id = o.delivery_id
	ORDER BY o.seq LIMIT ?`

// ranQuery reads a ledger row's outcome, as outboxListQuery joins it.
const ranQuery = `SELECT result, cloud_attempt, handler, response_status, exit_code, duration_ms, error
	FROM ledger WHERE ` + idKey

// OutboxList returns up to limit pending outbox entries, oldest first. An
// entry's Ran is shared: callers must not change it.
func (l *Ledger) OutboxList(ctx context.Context, limit int) ([]OutboxEntry, error) {
	if l.pending != nil {
		return l.pending.list(limit), nil
	}
	return listOutbox(ctx, l.read, limit)
}

// listOutbox reads up to limit outbox entries from the table, oldest first.
func listOutbox(ctx context.Context, db *sql.DB, limit int) ([]OutboxEntry, error) {
	rows, err := db.QueryContext(ctx, outboxListQuery, limit)
	if err != nil {
		return nil, fmt.Errorf("list outbox: %w", err)
	}
	defer rows.Close()
	var out []OutboxEntry
	for rows.Next() {
		var (
			ob        OutboxEntry
			createdAt int64
			ran       nullRun
		)
		if err := rows.Scan(&ob.Seq, &ob.DeliveryID, &ob.Kind, &ob.Error, &ob.Retryable, &ob.Attempt, &ob.NotStarted, &createdAt,
			&ran.result, &ran.attempt, &ran.handler, &ran.responseStatus, &ran.exitCode, &ran.duration, &ran.err); err != nil {
			return nil, fmt.Errorf("list outbox: %w", err)
		}
		ob.Ran = ran.run()
		ob.CreatedAt = time.UnixMilli(createdAt).UTC()
		out = append(out, ob)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list outbox: %w", err)
	}
	return out, nil
}

// nullRun scans a ledger row's outcome that may be absent (all NULL).
type nullRun struct {
	result, handler, err     sql.NullString
	attempt, duration        sql.NullInt64
	responseStatus, exitCode *int
}

func (n *nullRun) run() *RunResult {
	if !n.result.Valid {
		return nil
	}
	return &RunResult{Result: Result(n.result.String), Attempt: int(n.attempt.Int64), Handler: n.handler.String,
		ResponseStatus: n.responseStatus, ExitCode: n.exitCode, DurationMS: n.duration.Int64, Error: n.err.String}
}

// ranOf is what the ledger row e records of its run, as OutboxList reports
// it with the row's outbox entry (its own copy).
func ranOf(e *Entry) *RunResult {
	return &RunResult{Result: e.Result, Attempt: e.CloudAttempt, Handler: e.Handler, ResponseStatus: clonePtr(e.ResponseStatus),
		ExitCode: clonePtr(e.ExitCode), DurationMS: e.DurationMS, Error: e.Error}
}

func clonePtr(p *int) *int {
	if p == nil {
		return nil
	}
	return ptr(*p)
}

// readRun reads the run the ledger records of a delivery with st (a
// prepared ranQuery), nil when it has no row.
func readRun(ctx context.Context, st *sql.Stmt, deliveryID string) (*RunResult, error) {
	var n nullRun
	err := st.QueryRowContext(ctx, deliveryID, deliveryID).Scan(&n.result, &n.attempt, &n.handler, &n.responseStatus,
		&n.exitCode, &n.duration, &n.err)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the run of an outbox entry: %w", err)
	}
	return n.run(), nil
}

// OutboxDelete removes exactly the outbox entries with the given sequence
// numbers (those a successful heartbeat carried); entries queued since stay.
// It shares a transaction with concurrent records.
func (l *Ledger) OutboxDelete(ctx context.Context, seqs []int64) error {
	if len(seqs) == 0 {
		return nil
	}
	if err := l.submit(ctx, &op{kind: opDelete, seqs: seqs}); err != nil {
		return fmt.Errorf("delete %d outbox entries: %w", len(seqs), err)
	}
	return nil
}

// OutboxCount returns the number of pending outbox entries.
func (l *Ledger) OutboxCount(ctx context.Context) (int, error) {
	if l.pending != nil {
		return l.pending.count(), nil
	}
	var n int
	if err := l.read.QueryRowContext(ctx, `SELECT count(*) FROM outbox`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count outbox: %w", err)
	}
	return n, nil
}

// pending holds the outbox's entries as the last commit left them, each with
// the run its ledger row recorded when it was queued (a row pruned since by
// retention still reports it; the table, read again at open, no longer
// does). Entries are added in the order of their sequence numbers (the
// table's AUTOINCREMENT key, given by the one writer), so order stays sorted
// by appending; removed entries leave a hole in order until enough of them
// are compacted away.
type pending struct {
	mu    sync.Mutex
	bySeq map[int64]OutboxEntry
	byID  map[string]int64 // delivery id → the seq of its entry
	order []int64          // seqs, ascending, some removed
}

// newPending holds entries, the table's, oldest first.
func newPending(entries []OutboxEntry) *pending {
	p := &pending{bySeq: make(map[int64]OutboxEntry, len(entries)), byID: make(map[string]int64, len(entries))}
	for _, ob := range entries {
		p.bySeq[ob.Seq] = ob
		p.byID[ob.DeliveryID] = ob.Seq
		p.order = append(p.order, ob.Seq)
	}
	return p
}

// seqOf returns the seq of the delivery's pending entry.
func (p *pending) seqOf(deliveryID string) (int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.byID[deliveryID]
	return s, ok
}

// add puts ob in, replacing the entry of its delivery; the caller holds mu.
func (p *pending) add(ob OutboxEntry) {
	if old, ok := p.byID[ob.DeliveryID]; ok {
		delete(p.bySeq, old)
	}
	p.bySeq[ob.Seq] = ob
	p.byID[ob.DeliveryID] = ob.Seq
	p.order = append(p.order, ob.Seq)
}

// remove takes out the entries of seqs that are still there; the caller
// holds mu.
func (p *pending) remove(seqs []int64) {
	for _, s := range seqs {
		ob, ok := p.bySeq[s]
		if !ok {
			continue
		}
		delete(p.bySeq, s)
		if p.byID[ob.DeliveryID] == s {
			delete(p.byID, ob.DeliveryID)
		}
	}
}

// compact drops removed seqs from order once they are most of it; the
// caller holds mu.
func (p *pending) compact() {
	if len(p.order) < 64 || len(p.order) < 2*len(p.bySeq) {
		return
	}
	kept := p.order[:0]
	for _, s := range p.order {
		if _, ok := p.bySeq[s]; ok {
			kept = append(kept, s)
		}
	}
	p.order = kept
}

// change is one committed write to the outbox, applied to pending in the
// order of the transaction's writes.
type change struct {
	add  *OutboxEntry // an entry added, replacing its delivery's (nil: a deletion)
	seqs []int64      // entries deleted
}

// apply applies the changes of one committed transaction.
func (p *pending) apply(changes []change) {
	if len(changes) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range changes {
		if c.add != nil {
			p.add(*c.add)
		} else {
			p.remove(c.seqs)
		}
	}
	p.compact()
}

// list returns up to limit entries, oldest first.
func (p *pending) list(limit int) []OutboxEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := min(limit, len(p.bySeq))
	if n <= 0 {
		return nil
	}
	out := make([]OutboxEntry, 0, n)
	for _, s := range p.order {
		if ob, ok := p.bySeq[s]; ok {
			out = append(out, ob)
			if len(out) == n {
				break
			}
		}
	}
	return out
}

func (p *pending) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.bySeq)
}
