-- +goose Up
-- A delivery's last reported result is keyed as its delivery is (migration
-- 16): by the id's last 13 characters, its received millisecond, then the
-- id. Keyed by the id alone, led by the provider's random event id, each
-- result a host reported went to a random page of an index holding a row
-- for every delivery ever reported on, and a report of 128 dirtied (and
-- wrote to the WAL) a page for nearly each one. The table is rebuilt with
-- its rowids (SQLite cannot drop a primary key); the trigger that deletes
-- a delivery's result with it names the new key.
DROP TRIGGER delivery_results_delete;

CREATE TABLE delivery_results_keyed (
    delivery_id     TEXT NOT NULL,
    attempt         INTEGER NOT NULL DEFAULT 0,
    result          TEXT NOT NULL,
    handler         TEXT NOT NULL DEFAULT '',
    response_status INTEGER,
    exit_code       INTEGER,
    duration_ms     INTEGER NOT NULL DEFAULT 0,
    error           TEXT NOT NULL DEFAULT '',
    reported_at     INTEGER NOT NULL
) STRICT;

INSERT INTO delivery_results_keyed (rowid, delivery_id, attempt, result, handler, response_status, exit_code, duration_ms, error, reported_at)
    SELECT rowid, delivery_id, attempt, result, handler, response_status, exit_code, duration_ms, error, reported_at FROM delivery_results;
DROP TABLE delivery_results;
ALTER TABLE delivery_results_keyed RENAME TO delivery_results;
CREATE UNIQUE INDEX delivery_results_key_idx ON delivery_results (substr(delivery_id, -13), delivery_id);

-- +goose StatementBegin
CREATE TRIGGER delivery_results_delete AFTER DELETE ON deliveries
BEGIN
    DELETE FROM delivery_results
    WHERE substr(delivery_id, -13) = substr(OLD.delivery_id, -13) AND delivery_id = OLD.delivery_id;
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER delivery_results_delete;

CREATE TABLE delivery_results_by_id (
    delivery_id     TEXT PRIMARY KEY,
    attempt         INTEGER NOT NULL DEFAULT 0,
    result          TEXT NOT NULL,
    handler         TEXT NOT NULL DEFAULT '',
    response_status INTEGER,
    exit_code       INTEGER,
    duration_ms     INTEGER NOT NULL DEFAULT 0,
    error           TEXT NOT NULL DEFAULT '',
    reported_at     INTEGER NOT NULL
) STRICT;

INSERT INTO delivery_results_by_id (rowid, delivery_id, attempt, result, handler, response_status, exit_code, duration_ms, error, reported_at)
    SELECT rowid, delivery_id, attempt, result, handler, response_status, exit_code, duration_ms, error, reported_at FROM delivery_results;
DROP TABLE delivery_results;
ALTER TABLE delivery_results_by_id RENAME TO delivery_results;

-- +goose StatementBegin
CREATE TRIGGER delivery_results_delete AFTER DELETE ON deliveries
BEGIN
    DELETE FROM delivery_results WHERE delivery_id = OLD.delivery_id;
END;
-- +goose StatementEnd
