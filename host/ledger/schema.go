package ledger

import (
	"context"
	"database/sql"
	"fmt"
)

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
