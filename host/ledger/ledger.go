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
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/relaykit/relay/shared/dbfile"

	"github.com/relaykit/relay/shared/jsonwalk"
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
	DeliveryID  string    `json:"delivery_id"`
	Source      string    `json:"source"`
	EventType   string    `json:"event_type"`
	EventAction string    `json:"event_action"`
	ReceivedAt  time.Time `json:"received_at"` // when the cloud took the webhook in
	ProcessedAt time.Time `json:"processed_at"`
	Result      Result    `json:"result"`
	// Attempts counts the runs this host recorded; CloudAttempt is the
	// cloud's attempt number of the last one.
	Attempts      int    `json:"attempts"`
	CloudAttempt  int    `json:"cloud_attempt"`
	Error         string `json:"error"`
	DurationMS    int64  `json:"duration_ms"`
	CorrelationID string `json:"correlation_id"`
	Handler       string `json:"handler"`
	// ResponseStatus is the forward target's HTTP status, ExitCode the exec
	// program's exit code; nil when there was none.
	ResponseStatus *int `json:"response_status"`
	ExitCode       *int `json:"exit_code"`
	// Retryable says, for an error, whether the host asked the cloud to
	// try again (its nack's retryable): true, the cloud hands it out again
	// after its retry delay unless that was its last attempt; false, the
	// cloud dead-letters it. nil for success and skipped, and for errors
	// recorded before the ledger kept it.
	Retryable *bool `json:"retryable,omitempty"`
	// Output is the start of the forward target's answer or the end of the
	// program's output (truncated), or why the webhook was skipped.
	Output string `json:"output"`
	// Summary is one line about the webhook ("pull_request.opened acme/app #7");
	// Fields are what the host read from its payload ("slack.thread_ts": "…").
	Summary string            `json:"summary"`
	Fields  map[string]string `json:"fields"`
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

// migrations are applied in order; PRAGMA user_version records how many ran.
// doneQuery finds which of a leased batch's ids (one JSON array) are done,
// one primary-key look-up per id. The unary + keeps SQLite, which has no
// statistics, from reading the ledger_result index of every success
// instead: that walked the whole ledger for each batch (4 times the host's
// CPU per delivery in a 10,000-delivery drain, growing with the ledger).
const doneQuery = `SELECT l.delivery_id, l.result FROM json_each(?) AS j
	JOIN ledger AS l ON ` + joinKey + ` WHERE +l.result IN ('success', 'skipped')`

// idKey finds a ledger row by its delivery id (two ?, both the id), and
// joinKey the row of each id j.value lists. The ledger's key is led by the
// id's last 13 characters: the cloud ends every delivery id with the
// millisecond it received the webhook ({source}:{event id}:{received ms}),
// so rows are added at the end of the key's index. Keyed by the id alone,
// whose event ids are a provider's GUIDs or random strings, every record
// wrote a page somewhere in an index too large to stay cached: with
// 100,000 deliveries held, a record took half again the CPU
// (BenchmarkDeliveryRecordRandomIDs: 124-134 against 80-90 µs). A
// condition on delivery_id alone reads every row.
const (
	idKey   = `substr(delivery_id, -13) = substr(?, -13) AND delivery_id = ?`
	joinKey = `substr(l.delivery_id, -13) = substr(j.value, -13) AND l.delivery_id = j.value`
)

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
	`ALTER TABLE ledger ADD COLUMN received_at INTEGER NOT NULL DEFAULT 0; -- unix milliseconds
	ALTER TABLE ledger ADD COLUMN cloud_attempt INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE ledger ADD COLUMN response_status INTEGER;
	ALTER TABLE ledger ADD COLUMN exit_code INTEGER;
	ALTER TABLE ledger ADD COLUMN output TEXT NOT NULL DEFAULT '';
	ALTER TABLE ledger ADD COLUMN fields TEXT NOT NULL DEFAULT '{}'; -- JSON object of strings
	CREATE INDEX ledger_source ON ledger (source, processed_at DESC, delivery_id DESC);`,
	`ALTER TABLE outbox ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0;`,
	// The failures, newest first, without reading every row (the local
	// page's errors, ?result=error).
	`CREATE INDEX ledger_result ON ledger (result, processed_at DESC, delivery_id DESC);`,
	// A nack handing back a webhook never started says so after a restart.
	`ALTER TABLE outbox ADD COLUMN not_started INTEGER NOT NULL DEFAULT 0;`,
	// The ledger keyed in the order deliveries arrive (see idKey): the
	// table is built again, as SQLite cannot change a primary key.
	`CREATE TABLE ledger_keyed (
		delivery_id     TEXT NOT NULL,
		source          TEXT NOT NULL,
		event_type      TEXT NOT NULL DEFAULT '',
		event_action    TEXT NOT NULL DEFAULT '',
		processed_at    INTEGER NOT NULL, -- unix milliseconds
		result          TEXT NOT NULL CHECK (result IN ('success', 'error', 'skipped')),
		attempts        INTEGER NOT NULL DEFAULT 1,
		error           TEXT NOT NULL DEFAULT '',
		duration_ms     INTEGER NOT NULL DEFAULT 0,
		correlation_id  TEXT NOT NULL DEFAULT '',
		handler         TEXT NOT NULL DEFAULT '',
		summary         TEXT NOT NULL DEFAULT '',
		received_at     INTEGER NOT NULL DEFAULT 0, -- unix milliseconds
		cloud_attempt   INTEGER NOT NULL DEFAULT 0,
		response_status INTEGER,
		exit_code       INTEGER,
		output          TEXT NOT NULL DEFAULT '',
		fields          TEXT NOT NULL DEFAULT '{}' -- JSON object of strings
	);
	INSERT INTO ledger_keyed (
		delivery_id, source, event_type, event_action, processed_at, result, attempts, error,
		duration_ms, correlation_id, handler, summary, received_at, cloud_attempt, response_status,
		exit_code, output, fields)
	SELECT delivery_id, source, event_type, event_action, processed_at, result, attempts, error,
		duration_ms, correlation_id, handler, summary, received_at, cloud_attempt, response_status,
		exit_code, output, fields
	FROM ledger ORDER BY processed_at;
	DROP TABLE ledger;
	ALTER TABLE ledger_keyed RENAME TO ledger;
	CREATE UNIQUE INDEX ledger_key ON ledger (substr(delivery_id, -13), delivery_id);
	CREATE INDEX ledger_processed_at ON ledger (processed_at DESC, delivery_id DESC);
	CREATE INDEX ledger_source ON ledger (source, processed_at DESC, delivery_id DESC);
	CREATE INDEX ledger_result ON ledger (result, processed_at DESC, delivery_id DESC);`,
	// The failures' and skips' index holds only those (unsuccessful): a
	// success, nearly every record, no longer writes an entry into it. A
	// list of successes reads the processed_at index, which they fill.
	`DROP INDEX ledger_result;
	CREATE INDEX ledger_unsuccessful ON ledger (result, processed_at DESC, delivery_id DESC)
		WHERE ` + unsuccessful + `;`,
	// An outbox entry is replaced by its sequence number, which the writer
	// knows (outbox.go): the index of delivery ids had no other reader, and
	// each entry cost an insert into it and a delete from it.
	`DROP INDEX outbox_delivery_id;`,
	// Whether a failed run is tried again (its nack's retryable), for the
	// host page and the ledger's commands; NULL for other results.
	`ALTER TABLE ledger ADD COLUMN retryable INTEGER;`,
}

// unsuccessful is the condition of the ledger_unsuccessful index; a query
// that names it may read that index.
const unsuccessful = `result <> 'success'`

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

const entryColumns = `delivery_id, source, event_type, event_action, received_at, processed_at, result,
	attempts, cloud_attempt, error, duration_ms, correlation_id, handler, response_status, exit_code,
	output, summary, fields, retryable`

type scanner interface{ Scan(dest ...any) error }

func scanEntry(s scanner) (Entry, error) {
	var (
		e                       Entry
		receivedAt, processedAt int64
		status, exitCode        sql.NullInt64
		retryable               sql.NullBool
		fields                  string
	)
	err := s.Scan(&e.DeliveryID, &e.Source, &e.EventType, &e.EventAction, &receivedAt, &processedAt, &e.Result,
		&e.Attempts, &e.CloudAttempt, &e.Error, &e.DurationMS, &e.CorrelationID, &e.Handler, &status, &exitCode,
		&e.Output, &e.Summary, &fields, &retryable)
	if err != nil {
		return Entry{}, err
	}
	if receivedAt != 0 {
		e.ReceivedAt = time.UnixMilli(receivedAt).UTC()
	}
	e.ProcessedAt = time.UnixMilli(processedAt).UTC()
	if status.Valid {
		e.ResponseStatus = ptr(int(status.Int64))
	}
	if exitCode.Valid {
		e.ExitCode = ptr(int(exitCode.Int64))
	}
	if retryable.Valid {
		e.Retryable = ptr(retryable.Bool)
	}
	if err := json.Unmarshal([]byte(fields), &e.Fields); err != nil {
		return Entry{}, fmt.Errorf("fields of %q: %w", e.DeliveryID, err)
	}
	if len(e.Fields) == 0 {
		e.Fields = nil
	}
	return e, nil
}

func ptr[T any](v T) *T { return &v }

// encodeFields writes fields as a JSON object, keys sorted, that reads back
// as json.Marshal's would (invalid UTF-8 becomes U+FFFD, as there); it
// spares the reflection of json.Marshal on every record.
func encodeFields(fields map[string]string) (string, error) {
	keys := make([]string, 0, len(fields))
	size := 2
	for k, v := range fields {
		keys = append(keys, k)
		size += len(k) + len(v) + 6
	}
	slices.Sort(keys)
	b := make([]byte, 0, size)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonwalk.AppendString(b, k)
		b = append(b, ':')
		b = jsonwalk.AppendString(b, fields[k])
	}
	return string(append(b, '}')), nil
}

// nullable stores nil as NULL.
func nullable[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func unixMilliOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// DeliveryGet returns the ledger row of a delivery, or ErrNotFound.
func (l *Ledger) DeliveryGet(ctx context.Context, deliveryID string) (Entry, error) {
	e, err := scanEntry(l.get.QueryRowContext(ctx, deliveryID, deliveryID))
	if errors.Is(err, sql.ErrNoRows) {
		return Entry{}, ErrNotFound
	}
	if err != nil {
		return Entry{}, fmt.Errorf("get delivery %q: %w", deliveryID, err)
	}
	return e, nil
}

// DeliveriesDone returns, of the given deliveries, those the ledger records
// as done (success or skipped) with their result: one query for a whole
// leased batch.
func (l *Ledger) DeliveriesDone(ctx context.Context, deliveryIDs []string) (map[string]Result, error) {
	done := map[string]Result{}
	if len(deliveryIDs) == 0 {
		return done, nil
	}
	ids, err := json.Marshal(deliveryIDs)
	if err != nil {
		return nil, fmt.Errorf("look up %d deliveries: %w", len(deliveryIDs), err)
	}
	rows, err := l.done.QueryContext(ctx, string(ids))
	if err != nil {
		return nil, fmt.Errorf("look up %d deliveries: %w", len(deliveryIDs), err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id string
			r  Result
		)
		if err := rows.Scan(&id, &r); err != nil {
			return nil, fmt.Errorf("look up %d deliveries: %w", len(deliveryIDs), err)
		}
		done[id] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look up %d deliveries: %w", len(deliveryIDs), err)
	}
	return done, nil
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
//
// Concurrent calls share one transaction (see Ledger); each returns once the
// transaction holding its record committed, or with its own error. A call
// whose ctx ends while the record still waits for the writer returns ctx's
// error and the record is not written; once the writer took it, the call
// waits for that transaction's outcome.
func (l *Ledger) DeliveryRecord(ctx context.Context, p RecordParams) (int, error) {
	e := p.Entry
	if !e.Result.Valid() {
		return 0, fmt.Errorf("record delivery %q: invalid result %q", e.DeliveryID, e.Result)
	}
	o := &op{kind: opRecord, entry: e, fields: "{}"}
	o.ob = OutboxEntry{DeliveryID: e.DeliveryID, Kind: OutboxAck, CreatedAt: e.ProcessedAt}
	o.entry.Retryable = nil
	if e.Result == ResultError {
		o.ob.Kind, o.ob.Error, o.ob.Retryable, o.ob.Attempt = OutboxNack, e.Error, p.Retryable, e.CloudAttempt
		o.entry.Retryable = ptr(p.Retryable)
	}
	if len(e.Fields) > 0 {
		fields, err := encodeFields(e.Fields)
		if err != nil {
			return 0, fmt.Errorf("record delivery %q: encode fields: %w", e.DeliveryID, err)
		}
		o.fields = fields
	}
	if err := l.submit(ctx, o); err != nil {
		return 0, fmt.Errorf("record delivery %q: %w", e.DeliveryID, err)
	}
	return o.attempts, nil
}

// DeliveryCount returns the number of rows in the ledger.
func (l *Ledger) DeliveryCount(ctx context.Context) (int, error) {
	var n int
	if err := l.read.QueryRowContext(ctx, `SELECT count(*) FROM ledger`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count ledger: %w", err)
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
	q, args, err := listQuery(p)
	if err != nil {
		return nil, "", err
	}
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

// listQuery is DeliveryList's query of p, and its arguments.
func listQuery(p ListParams) (string, []any, error) {
	var (
		where []string
		args  []any
	)
	if p.Result != "" {
		where, args = append(where, "result = ?"), append(args, p.Result)
		if p.Result != ResultSuccess {
			where = append(where, unsuccessful)
		}
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
			return "", nil, err
		}
		where, args = append(where, "(processed_at, delivery_id) < (?, ?)"), append(args, at, id)
	}
	q := `SELECT ` + entryColumns + ` FROM ledger`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY processed_at DESC, delivery_id DESC LIMIT ?`
	return q, append(args, p.Limit+1), nil
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

// ParseSince reads a "since" filter: an RFC 3339 time, or a positive
// duration ("1h", "30m") meaning that long before now.
func ParseSince(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("invalid since %q: want an RFC 3339 time (2026-02-16T10:00:00Z) or a duration (1h, 30m)", v)
}
