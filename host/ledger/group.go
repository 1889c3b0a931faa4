package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/relaykit/relay/shared/jsonwalk"
)

// maxGroup bounds the writes merged into one transaction.
const maxGroup = 1024

// groupWait is how long the writer waits for more writes to join a
// transaction when several are already waiting: a sign that handlers finish
// faster than transactions commit. Every commit costs an fsync and the WAL
// pages it touched (the ledger row, its indexes, the outbox), whether it
// holds five writes or five hundred; a draining host committed about five
// at a time. A write that arrives alone is committed at once.
const groupWait = 2 * time.Millisecond

type opKind uint8

const (
	opRecord  opKind = iota // a ledger row and its outbox entry
	opEnqueue               // an outbox entry alone
	opDelete                // outbox entries by sequence number
)

// States of an op: queued until the writer takes it or its caller gives up.
const (
	opQueued int32 = iota
	opTaken
	opCanceled
)

// op is one write waiting for the writer.
type op struct {
	kind   opKind
	entry  Entry
	fields string // entry.Fields as JSON
	ob     OutboxEntry
	seqs   []int64

	state    atomic.Int32
	attempts int   // set by the writer: the row's attempts (opRecord)
	err      error // set by the writer before done is closed
	done     chan struct{}
}

// submit hands o to the writer and waits until the transaction holding it
// committed (nil) or failed (its error). A ctx that ends while o still waits
// in the queue withdraws it.
func (l *Ledger) submit(ctx context.Context, o *op) error {
	if l.write == nil {
		return ErrReadOnly
	}
	o.done = make(chan struct{})
	select {
	case l.ops <- o:
	case <-l.closing:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		if o.state.CompareAndSwap(opQueued, opCanceled) {
			return ctx.Err()
		}
	case <-l.writerDone:
		// Queued after the writer's last look at the queue.
		if o.state.CompareAndSwap(opQueued, opCanceled) {
			return ErrClosed
		}
	}
	// The writer took it: its transaction decides.
	<-o.done
	return o.err
}

// writer commits the queued writes, as many as wait at once in one
// transaction, until the ledger closes; it commits what still waits then.
func (l *Ledger) writer() {
	defer close(l.writerDone)
	batch := make([]*op, 0, maxGroup)
	for {
		batch = batch[:0]
		select {
		case o := <-l.ops:
			batch = append(batch, o)
		case <-l.closing:
			for {
				select {
				case o := <-l.ops:
					batch = append(batch, o)
					if len(batch) == maxGroup {
						l.commit(batch)
						batch = batch[:0]
					}
					continue
				default:
				}
				l.commit(batch)
				return
			}
		}
		// Everything that queued up while the last transaction ran joins.
	more:
		for len(batch) < maxGroup {
			select {
			case o := <-l.ops:
				batch = append(batch, o)
			default:
				break more
			}
		}
		if len(batch) > 1 {
			batch = l.gather(batch)
		}
		l.commit(batch)
	}
}

// gather adds the writes that arrive within groupWait to batch, up to
// maxGroup of them; closing the ledger ends the wait.
func (l *Ledger) gather(batch []*op) []*op {
	t := time.NewTimer(groupWait)
	defer t.Stop()
	for len(batch) < maxGroup {
		// Writes already queued join first: a select would pick the timer
		// as often as them once it fired.
		select {
		case o := <-l.ops:
			batch = append(batch, o)
			continue
		default:
		}
		select {
		case o := <-l.ops:
			batch = append(batch, o)
		case <-t.C:
			return batch
		case <-l.closing:
			return batch
		}
	}
	return batch
}

// commit writes batch in one transaction. If that fails, each write is tried
// again in a transaction of its own, so that one bad write fails alone.
func (l *Ledger) commit(batch []*op) {
	taken := batch[:0]
	for _, o := range batch {
		if o.state.CompareAndSwap(opQueued, opTaken) {
			taken = append(taken, o)
		}
	}
	if len(taken) == 0 {
		return
	}
	err := l.apply(taken)
	if err != nil && len(taken) > 1 {
		for _, o := range taken {
			o.err = l.apply([]*op{o})
			close(o.done)
		}
		return
	}
	for _, o := range taken {
		o.err = err
		close(o.done)
	}
}

// apply runs ops in one transaction. The writes of the ledger's own writer
// are not bound to any caller's context: once taken, a write completes.
func (l *Ledger) apply(ops []*op) error {
	ctx := context.Background()
	tx, err := l.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	var upsert, outboxDel, outboxIns, delSeqs, ran *sql.Stmt
	stmt := func(st **sql.Stmt, prepared *sql.Stmt) *sql.Stmt {
		if *st == nil {
			*st = tx.StmtContext(ctx, prepared)
		}
		return *st
	}
	var recorded []*op
	changes := make([]change, 0, len(ops))
	added := make(map[string]int64, len(ops)) // delivery id → the seq its entry got in this transaction
	for _, o := range ops {
		switch o.kind {
		case opRecord:
			e := o.entry
			_, err = stmt(&upsert, l.upsert).ExecContext(ctx,
				e.DeliveryID, e.Source, e.EventType, e.EventAction, unixMilliOrZero(e.ReceivedAt),
				e.ProcessedAt.UnixMilli(), string(e.Result), e.CloudAttempt, e.Error, e.DurationMS, e.CorrelationID,
				e.Handler, nullable(e.ResponseStatus), nullable(e.ExitCode), e.Output, e.Summary,
				o.fields, nullable(e.Retryable))
			if err != nil {
				err = fmt.Errorf("upsert ledger row: %w", err)
				break
			}
			recorded = append(recorded, o)
			o.ob.Ran = ranOf(&o.entry)
			fallthrough
		case opEnqueue:
			ob := o.ob
			// The delivery's pending entry, if it has one, is replaced: it
			// is known by its sequence number, from this transaction or
			// from pending.
			prev, ok := added[ob.DeliveryID]
			if !ok {
				prev, ok = l.pending.seqOf(ob.DeliveryID)
			}
			if ok {
				if _, err = stmt(&outboxDel, l.outboxDel).ExecContext(ctx, prev); err != nil {
					err = fmt.Errorf("replace outbox entry: %w", err)
					break
				}
			}
			var res sql.Result
			if res, err = stmt(&outboxIns, l.outboxIns).ExecContext(ctx, ob.DeliveryID, string(ob.Kind), ob.Error,
				ob.Retryable, ob.Attempt, ob.NotStarted, ob.CreatedAt.UnixMilli()); err != nil {
				err = fmt.Errorf("insert outbox entry: %w", err)
				break
			}
			if ob.Seq, err = res.LastInsertId(); err != nil {
				err = fmt.Errorf("insert outbox entry: %w", err)
				break
			}
			ob.CreatedAt = time.UnixMilli(ob.CreatedAt.UnixMilli()).UTC()
			if o.kind == opEnqueue {
				if ob.Ran, err = readRun(ctx, stmt(&ran, l.ran), ob.DeliveryID); err != nil {
					break
				}
			}
			added[ob.DeliveryID] = ob.Seq
			changes = append(changes, change{add: &ob})
		case opDelete:
			if _, err = stmt(&delSeqs, l.outboxDelSeqs).ExecContext(ctx, jsonwalk.Ints(o.seqs)); err != nil {
				err = fmt.Errorf("delete outbox entries: %w", err)
			}
			changes = append(changes, change{seqs: o.seqs})
		}
		if err != nil {
			tx.Rollback()
			return err
		}
	}
	if err := l.readAttempts(ctx, tx, recorded); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	l.commits.Add(1)
	l.pending.apply(changes)
	return nil
}

// readAttempts sets the attempts of each recorded op: its row's count as
// this transaction leaves it (a delivery recorded twice in one transaction
// reads the second count for both).
func (l *Ledger) readAttempts(ctx context.Context, tx *sql.Tx, recorded []*op) error {
	if len(recorded) == 0 {
		return nil
	}
	ids := make([]string, len(recorded))
	for i, o := range recorded {
		ids[i] = o.entry.DeliveryID
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return fmt.Errorf("read attempts: %w", err)
	}
	rows, err := tx.StmtContext(ctx, l.attempts).QueryContext(ctx, string(list))
	if err != nil {
		return fmt.Errorf("read attempts: %w", err)
	}
	defer rows.Close()
	byID := make(map[string]int, len(recorded))
	for rows.Next() {
		var (
			id string
			n  int
		)
		if err := rows.Scan(&id, &n); err != nil {
			return fmt.Errorf("read attempts: %w", err)
		}
		byID[id] = n
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read attempts: %w", err)
	}
	for _, o := range recorded {
		o.attempts = byID[o.entry.DeliveryID]
	}
	return nil
}
