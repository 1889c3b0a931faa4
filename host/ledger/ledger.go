// Package ledger is the host's durable memory: a SQLite file that records every
// delivery the host has processed and the acks and nacks still waiting to be
// reported to the cloud (the outbox). A delivery's ledger row and its outbox
// entry are written in one transaction, which is what lets a restarted host
// re-send an ack without running the handler again.
package ledger

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// ErrNotFound is returned when a delivery is not in the ledger.
var ErrNotFound = errors.New("not found")

// ErrInvalidCursor is returned by DeliveryList for a cursor it did not make.
var ErrInvalidCursor = errors.New("invalid cursor")

// Result is the outcome recorded for a delivery.
type Result string

// Results a ledger row can hold.
const (
	ResultSuccess Result = "success"
	ResultError   Result = "error"
	ResultSkipped Result = "skipped"
)

// Valid reports whether r is one of the known results.
func (r Result) Valid() bool {
	return r == ResultSuccess || r == ResultError || r == ResultSkipped
}

// Done reports whether a delivery with this result must not be processed again.
func (r Result) Done() bool { return r == ResultSuccess || r == ResultSkipped }

// Entry is one processed delivery.
type Entry struct {
	DeliveryID    string    `json:"delivery_id"`
	Source        string    `json:"source"`
	EventType     string    `json:"event_type"`
	EventAction   string    `json:"event_action"`
	ProcessedAt   time.Time `json:"processed_at"`
	Result        Result    `json:"result"`
	Attempts      int       `json:"attempts"`
	Error         string    `json:"error"`
	DurationMS    int64     `json:"duration_ms"`
	CorrelationID string    `json:"correlation_id"`
	Handler       string    `json:"handler"`
	Summary       string    `json:"summary"`
}

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
	CreatedAt  time.Time
}

// Ledger is the SQLite-backed ledger. It writes through a single connection
// and reads through a small pool of read-only ones (WAL lets them run
// concurrently with the writer).
type Ledger struct {
	write *sql.DB
	read  *sql.DB
}

// Open opens (creating if needed) the ledger at path and brings its schema up
// to date. Opening an existing ledger again is harmless.
func Open(ctx context.Context, path string) (*Ledger, error) {
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("open ledger %q: path must not contain '?' or '#'", path)
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
	if err := read.PingContext(ctx); err != nil {
		write.Close()
		read.Close()
		return nil, fmt.Errorf("open ledger %q for reading: %w", path, err)
	}
	return &Ledger{write: write, read: read}, nil
}

// Close closes the ledger's connections.
func (l *Ledger) Close() error {
	return errors.Join(l.read.Close(), l.write.Close())
}

// migrations are applied in order; PRAGMA user_version records how many ran.
var migrations = []string{
	`CREATE TABLE ledger (
		delivery_id    TEXT PRIMARY KEY,
		source         TEXT NOT NULL,
		event_type     TEXT NOT NULL DEFAULT '',
		event_action   TEXT NOT NULL DEFAULT '',
		processed_at   INTEGER NOT NULL, -- unix milliseconds
		result         TEXT NOT NULL CHECK (result IN ('success', 'error', 'skipped')),
		attempts       INTEGER NOT NULL DEFAULT 1,
		error          TEXT NOT NULL DEFAULT '',
		duration_ms    INTEGER NOT NULL DEFAULT 0,
		correlation_id TEXT NOT NULL DEFAULT '',
		handler        TEXT NOT NULL DEFAULT '',
		summary        TEXT NOT NULL DEFAULT ''
	);
	CREATE INDEX ledger_processed_at ON ledger (processed_at DESC, delivery_id DESC);
	CREATE TABLE outbox (
		seq         INTEGER PRIMARY KEY AUTOINCREMENT,
		delivery_id TEXT NOT NULL,
		kind        TEXT NOT NULL CHECK (kind IN ('ack', 'nack')),
		error       TEXT NOT NULL DEFAULT '',
		retryable   INTEGER NOT NULL DEFAULT 0,
		created_at  INTEGER NOT NULL -- unix milliseconds
	);
	CREATE INDEX outbox_delivery_id ON outbox (delivery_id);`,
}

func migrate(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	var version int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		return fmt.Errorf("read user_version: %w", err)
	}
	if version > len(migrations) {
		return fmt.Errorf("schema version %d is newer than this binary knows (%d)", version, len(migrations))
	}
	for i := version; i < len(migrations); i++ {
		if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
			return fmt.Errorf("apply migration %d: %w", i+1, err)
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, len(migrations))); err != nil {
		return fmt.Errorf("set user_version: %w", err)
	}
	return tx.Commit()
}

const entryColumns = `delivery_id, source, event_type, event_action, processed_at, result,
	attempts, error, duration_ms, correlation_id, handler, summary`

type scanner interface{ Scan(dest ...any) error }

func scanEntry(s scanner) (Entry, error) {
	var (
		e           Entry
		processedAt int64
	)
	err := s.Scan(&e.DeliveryID, &e.Source, &e.EventType, &e.EventAction, &processedAt, &e.Result,
		&e.Attempts, &e.Error, &e.DurationMS, &e.CorrelationID, &e.Handler, &e.Summary)
	if err != nil {
		return Entry{}, err
	}
	e.ProcessedAt = time.UnixMilli(processedAt).UTC()
	return e, nil
}

// DeliveryGet returns the ledger row of a delivery, or ErrNotFound.
func (l *Ledger) DeliveryGet(ctx context.Context, deliveryID string) (Entry, error) {
	row := l.read.QueryRowContext(ctx, `SELECT `+entryColumns+` FROM ledger WHERE delivery_id = ?`, deliveryID)
	e, err := scanEntry(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Entry{}, ErrNotFound
	}
	if err != nil {
		return Entry{}, fmt.Errorf("get delivery %q: %w", deliveryID, err)
	}
	return e, nil
}

// RecordParams is the outcome of processing one delivery.
type RecordParams struct {
	// Entry is the ledger row. Its Attempts field is ignored: the ledger
	// counts attempts itself (1 on first record, +1 on each re-record).
	Entry Entry
	// Retryable is reported with the nack when Entry.Result is ResultError.
	Retryable bool
}

// DeliveryRecord writes a delivery's ledger row and queues its ack (success,
// skipped) or nack (error) in the outbox, in one transaction. A pending outbox
// entry of the same delivery is replaced. It returns the stored attempts count.
func (l *Ledger) DeliveryRecord(ctx context.Context, p RecordParams) (int, error) {
	e := p.Entry
	if !e.Result.Valid() {
		return 0, fmt.Errorf("record delivery %q: invalid result %q", e.DeliveryID, e.Result)
	}
	ob := OutboxEntry{DeliveryID: e.DeliveryID, Kind: OutboxAck, CreatedAt: e.ProcessedAt}
	if e.Result == ResultError {
		ob.Kind, ob.Error, ob.Retryable = OutboxNack, e.Error, p.Retryable
	}
	var attempts int
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `INSERT INTO ledger (`+entryColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?)
			ON CONFLICT (delivery_id) DO UPDATE SET
				source = excluded.source, event_type = excluded.event_type,
				event_action = excluded.event_action, processed_at = excluded.processed_at,
				result = excluded.result, attempts = ledger.attempts + 1,
				error = excluded.error, duration_ms = excluded.duration_ms,
				correlation_id = excluded.correlation_id, handler = excluded.handler,
				summary = excluded.summary
			RETURNING attempts`,
			e.DeliveryID, e.Source, e.EventType, e.EventAction, e.ProcessedAt.UnixMilli(), e.Result,
			e.Error, e.DurationMS, e.CorrelationID, e.Handler, e.Summary).Scan(&attempts)
		if err != nil {
			return fmt.Errorf("upsert ledger row: %w", err)
		}
		return outboxPut(ctx, tx, ob)
	})
	if err != nil {
		return 0, fmt.Errorf("record delivery %q: %w", e.DeliveryID, err)
	}
	return attempts, nil
}

// OutboxEnqueue queues an outcome on its own, replacing a pending entry of the
// same delivery. It is used to ack again a delivery the ledger already holds.
func (l *Ledger) OutboxEnqueue(ctx context.Context, ob OutboxEntry) error {
	err := l.inTx(ctx, func(tx *sql.Tx) error { return outboxPut(ctx, tx, ob) })
	if err != nil {
		return fmt.Errorf("enqueue %s for %q: %w", ob.Kind, ob.DeliveryID, err)
	}
	return nil
}

func outboxPut(ctx context.Context, tx *sql.Tx, ob OutboxEntry) error {
	if ob.Kind != OutboxAck && ob.Kind != OutboxNack {
		return fmt.Errorf("invalid outbox kind %q", ob.Kind)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM outbox WHERE delivery_id = ?`, ob.DeliveryID); err != nil {
		return fmt.Errorf("replace outbox entry: %w", err)
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO outbox (delivery_id, kind, error, retryable, created_at)
		VALUES (?, ?, ?, ?, ?)`, ob.DeliveryID, ob.Kind, ob.Error, ob.Retryable, ob.CreatedAt.UnixMilli())
	if err != nil {
		return fmt.Errorf("insert outbox entry: %w", err)
	}
	return nil
}

// OutboxList returns up to limit pending outbox entries, oldest first.
func (l *Ledger) OutboxList(ctx context.Context, limit int) ([]OutboxEntry, error) {
	rows, err := l.read.QueryContext(ctx, `SELECT seq, delivery_id, kind, error, retryable, created_at
		FROM outbox ORDER BY seq LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("list outbox: %w", err)
	}
	defer rows.Close()
	var out []OutboxEntry
	for rows.Next() {
		var (
			ob        OutboxEntry
			createdAt int64
		)
		if err := rows.Scan(&ob.Seq, &ob.DeliveryID, &ob.Kind, &ob.Error, &ob.Retryable, &createdAt); err != nil {
			return nil, fmt.Errorf("list outbox: %w", err)
		}
		ob.CreatedAt = time.UnixMilli(createdAt).UTC()
		out = append(out, ob)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list outbox: %w", err)
	}
	return out, nil
}

// OutboxDelete removes exactly the outbox entries with the given sequence
// numbers (those a successful heartbeat carried); entries queued since stay.
func (l *Ledger) OutboxDelete(ctx context.Context, seqs []int64) error {
	if len(seqs) == 0 {
		return nil
	}
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, `DELETE FROM outbox WHERE seq = ?`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, s := range seqs {
			if _, err := stmt.ExecContext(ctx, s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete %d outbox entries: %w", len(seqs), err)
	}
	return nil
}

// OutboxCount returns the number of pending outbox entries.
func (l *Ledger) OutboxCount(ctx context.Context) (int, error) {
	var n int
	if err := l.read.QueryRowContext(ctx, `SELECT count(*) FROM outbox`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count outbox: %w", err)
	}
	return n, nil
}

// ListParams filters DeliveryList. Zero values mean "no filter".
type ListParams struct {
	Result Result
	Source string
	Since  time.Time // processed at or after
	Limit  int       // required, > 0
	Cursor string    // from a previous page's next cursor
}

// DeliveryList returns ledger rows, newest first, and the cursor of the next
// page ("" when this page is the last). It returns ErrInvalidCursor for a
// cursor it cannot read.
func (l *Ledger) DeliveryList(ctx context.Context, p ListParams) ([]Entry, string, error) {
	if p.Limit <= 0 {
		return nil, "", fmt.Errorf("list deliveries: limit must be positive")
	}
	var (
		where []string
		args  []any
	)
	if p.Result != "" {
		where, args = append(where, "result = ?"), append(args, p.Result)
	}
	if p.Source != "" {
		where, args = append(where, "source = ?"), append(args, p.Source)
	}
	if !p.Since.IsZero() {
		where, args = append(where, "processed_at >= ?"), append(args, p.Since.UnixMilli())
	}
	if p.Cursor != "" {
		at, id, err := decodeCursor(p.Cursor)
		if err != nil {
			return nil, "", err
		}
		where, args = append(where, "(processed_at, delivery_id) < (?, ?)"), append(args, at, id)
	}
	q := `SELECT ` + entryColumns + ` FROM ledger`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY processed_at DESC, delivery_id DESC LIMIT ?`
	args = append(args, p.Limit+1)

	rows, err := l.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list deliveries: %w", err)
	}
	defer rows.Close()
	entries := []Entry{}
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list deliveries: %w", err)
		}
		entries = append(entries, e)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list deliveries: %w", err)
	}
	var next string
	if len(entries) > p.Limit {
		entries = entries[:p.Limit]
		last := entries[len(entries)-1]
		next = encodeCursor(last.ProcessedAt.UnixMilli(), last.DeliveryID)
	}
	return entries, next, nil
}

func encodeCursor(processedAtMS int64, deliveryID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(processedAtMS, 10) + "|" + deliveryID))
}

func decodeCursor(c string) (int64, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", ErrInvalidCursor
	}
	ms, id, ok := strings.Cut(string(raw), "|")
	if !ok || id == "" {
		return 0, "", ErrInvalidCursor
	}
	at, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return 0, "", ErrInvalidCursor
	}
	return at, id, nil
}

func (l *Ledger) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
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
