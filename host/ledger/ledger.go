// Package ledger is the host's durable memory: a SQLite file that records every
// delivery the host has processed and the acks and nacks still waiting to be
// reported to the cloud (the outbox). A delivery's ledger row and its outbox
// entry are written in one transaction, which is what lets a restarted host
// re-send an ack without running the handler again.
package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/relaykit/relay/shared/dbfile"
)

// ErrNotFound is returned when a delivery is not in the ledger.
var ErrNotFound = errors.New("not found")

// Ledger is the SQLite-backed ledger. It writes through a single connection
// and reads through a small pool of read-only ones (WAL lets them run
// concurrently with the writer, in this process or another).
//
// Records, outbox entries and outbox deletions go through one writer
// goroutine that merges the calls waiting at the same time into one
// transaction (group commit): many concurrent DeliveryRecord calls cost one
// fsync, and each still returns only once the transaction holding its write
// has committed.
type Ledger struct {
	write *sql.DB // nil when opened with OpenReadOnly
	read  *sql.DB

	// Prepared statements of the hot paths (nil when read-only).
	upsert, attempts, outboxDel, outboxIns, outboxDelSeqs, ran *sql.Stmt
	get, done                                                  *sql.Stmt

	// pending is the outbox as the writer's last commit left it (nil when
	// read-only): see outbox.go.
	pending *pending

	ops        chan *op      // writes waiting for the writer
	closing    chan struct{} // closed by Close: the writer commits what waits, then stops
	writerDone chan struct{} // closed when the writer has stopped
	closeOnce  sync.Once
	commits    atomic.Int64 // transactions the writer committed
}

// ErrReadOnly is returned by writes to a ledger opened with OpenReadOnly.
var ErrReadOnly = errors.New("ledger opened read-only")

// ErrClosed is returned by writes to a closed ledger.
var ErrClosed = errors.New("ledger closed")

// Open opens (creating if needed) the ledger at path and brings its schema up
// to date. Opening an existing ledger again is harmless. Every write is
// durable (synchronous=FULL) when it returns. The file and its -wal and -shm
// files are 0600.
func Open(ctx context.Context, path string) (*Ledger, error) {
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("open ledger %q: path must not contain '?' or '#'", path)
	}
	if err := dbfile.MakePrivate(path); err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	write, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open ledger %q: %w", path, err)
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0)
	if err := migrate(ctx, write); err != nil {
		write.Close()
		return nil, fmt.Errorf("migrate ledger %q: %w", path, err)
	}
	read, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_query_only=1")
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("open ledger %q for reading: %w", path, err)
	}
	read.SetMaxOpenConns(4)
	read.SetMaxIdleConns(4)
	if err := read.PingContext(ctx); err != nil {
		write.Close()
		read.Close()
		return nil, fmt.Errorf("open ledger %q for reading: %w", path, err)
	}
	l := &Ledger{write: write, read: read}
	if err := l.prepare(ctx); err != nil {
		l.closeStmts()
		write.Close()
		read.Close()
		return nil, fmt.Errorf("open ledger %q: prepare: %w", path, err)
	}
	entries, err := listOutbox(ctx, read, -1)
	if err != nil {
		l.closeStmts()
		write.Close()
		read.Close()
		return nil, fmt.Errorf("open ledger %q: %w", path, err)
	}
	l.pending = newPending(entries)
	l.ops = make(chan *op, maxGroup)
	l.closing = make(chan struct{})
	l.writerDone = make(chan struct{})
	go l.writer()
	return l, nil
}

// OpenReadOnly opens an existing ledger for reading only, as the ledger
// commands do while `host run` may be writing it. It never creates the file
// nor changes its schema: a ledger of another schema version is refused.
func OpenReadOnly(ctx context.Context, path string) (*Ledger, error) {
	if strings.ContainsAny(path, "?#%") {
		return nil, fmt.Errorf("open ledger %q: path must not contain '?', '#' or '%%'", path)
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	read, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, fmt.Errorf("open ledger %q: %w", path, err)
	}
	read.SetMaxOpenConns(2)
	var version int
	if err := read.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		read.Close()
		return nil, fmt.Errorf("open ledger %q: %w", path, err)
	}
	if version != len(migrations) {
		read.Close()
		if version < len(migrations) {
			return nil, fmt.Errorf("open ledger %q: schema version %d is older than this binary's (%d): start `host run` once to upgrade it", path, version, len(migrations))
		}
		return nil, fmt.Errorf("open ledger %q: schema version %d is newer than this binary knows (%d)", path, version, len(migrations))
	}
	l := &Ledger{read: read}
	if err := l.prepare(ctx); err != nil {
		l.closeStmts()
		read.Close()
		return nil, fmt.Errorf("open ledger %q: prepare: %w", path, err)
	}
	return l, nil
}

// Close waits for the writes already queued to commit, then closes the
// ledger's connections. Writes after Close return ErrClosed.
func (l *Ledger) Close() error {
	if l.write == nil {
		l.closeStmts()
		return l.read.Close()
	}
	l.closeOnce.Do(func() { close(l.closing) })
	<-l.writerDone
	l.closeStmts()
	return errors.Join(l.read.Close(), l.write.Close())
}

// prepare prepares the statements of the hot paths: the lookups on the
// read pool and, unless read-only, the writes on the writer's connection.
func (l *Ledger) prepare(ctx context.Context) error {
	var err error
	prep := func(db *sql.DB, q string) *sql.Stmt {
		if err != nil {
			return nil
		}
		var st *sql.Stmt
		st, err = db.PrepareContext(ctx, q)
		return st
	}
	l.get = prep(l.read, `SELECT `+entryColumns+` FROM ledger WHERE `+idKey)
	l.done = prep(l.read, doneQuery)
	if l.write != nil {
		l.upsert = prep(l.write, `INSERT INTO ledger (`+entryColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (substr(delivery_id, -13), delivery_id) DO UPDATE SET
				source = excluded.source, event_type = excluded.event_type,
				event_action = excluded.event_action, received_at = excluded.received_at,
				processed_at = excluded.processed_at, result = excluded.result,
				attempts = ledger.attempts + 1, cloud_attempt = excluded.cloud_attempt,
				error = excluded.error, duration_ms = excluded.duration_ms,
				correlation_id = excluded.correlation_id, handler = excluded.handler,
				response_status = excluded.response_status, exit_code = excluded.exit_code,
				output = excluded.output, summary = excluded.summary, fields = excluded.fields,
				retryable = excluded.retryable`)
		// The attempts of a transaction's rows, read once for all of them:
		// RETURNING on each upsert cost SQLite a temporary table per row,
		// a third of a record's CPU.
		l.attempts = prep(l.write, `SELECT l.delivery_id, l.attempts FROM json_each(?) AS j
			JOIN ledger AS l ON `+joinKey)
		l.outboxDel = prep(l.write, `DELETE FROM outbox WHERE seq = ?`)
		l.outboxIns = prep(l.write, `INSERT INTO outbox (delivery_id, kind, error, retryable, attempt, not_started, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`)
		l.outboxDelSeqs = prep(l.write, `DELETE FROM outbox WHERE seq IN (SELECT value FROM json_each(?))`)
		l.ran = prep(l.write, ranQuery)
	}
	return err
}

func (l *Ledger) closeStmts() {
	for _, st := range []*sql.Stmt{l.get, l.done, l.upsert, l.attempts, l.outboxDel, l.outboxIns, l.outboxDelSeqs, l.ran} {
		if st != nil {
			st.Close()
		}
	}
}

// Probe commits a write that leaves nothing behind: it fails when the
// ledger cannot record (its disk is full, its file read-only), and
// succeeds once it can again.
func (l *Ledger) Probe(ctx context.Context) error {
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO outbox (delivery_id, kind, created_at) VALUES ('', 'ack', 0)`)
		if err != nil {
			return err
		}
		seq, err := res.LastInsertId()
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM outbox WHERE seq = ?`, seq)
		return err
	})
	if err != nil {
		return fmt.Errorf("ledger probe: %w", err)
	}
	return nil
}

func (l *Ledger) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	if l.write == nil {
		return ErrReadOnly
	}
	tx, err := l.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
