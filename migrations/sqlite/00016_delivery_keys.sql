-- +goose Up
-- A delivery's row is found by an index led by its received millisecond,
-- no longer by the delivery id's primary key. Delivery ids
-- ({source}:{event_id}:{ms}) start with the provider's event id, which is
-- random (GitHub's are UUIDs, Stripe's evt_…): keyed by it, every webhook
-- stored landed on a random page of the key's index, and a batch of intake
-- dirtied (and wrote to the WAL) a page of it per webhook, about 4 KB of
-- the 21 KB a webhook wrote. As the audit trail's index does (migration
-- 12), the unique index is led by the id's last 13 characters, its
-- received millisecond: new deliveries are appended to it. Lookups by
-- delivery id name the same expression (idKey and idsIn in the store), and
-- the index still holds delivery ids distinct. The dedupe key (host,
-- source, event id) stays the one index intake writes at random places.
--
-- The table is rebuilt (SQLite cannot drop a primary key) with its rowids,
-- columns, indexes and triggers. delivery_results' foreign key goes (a
-- parent key must be a plain unique column): a delivery's result goes with
-- it by a trigger, as its body and events do.
--
-- Postgres keeps its primary key: its WAL logs each index entry (a full
-- page only on a page's first change after a checkpoint), not each page
-- changed by a commit as SQLite's WAL does, so a random key costs it bytes,
-- not pages.
CREATE TABLE delivery_results_keyed (
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

INSERT INTO delivery_results_keyed (delivery_id, attempt, result, handler, response_status, exit_code, duration_ms, error, reported_at)
    SELECT delivery_id, attempt, result, handler, response_status, exit_code, duration_ms, error, reported_at FROM delivery_results;
DROP TABLE delivery_results;
ALTER TABLE delivery_results_keyed RENAME TO delivery_results;

CREATE TABLE deliveries_keyed (
    delivery_id      TEXT NOT NULL,
    host_id          TEXT NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
    source           TEXT NOT NULL,
    event_id         TEXT NOT NULL,
    event_type       TEXT NOT NULL DEFAULT '',
    event_action     TEXT NOT NULL DEFAULT '',
    headers          TEXT NOT NULL,
    body_size        INTEGER NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('queued', 'delivering', 'delivered', 'acked', 'retrying', 'dlq')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL,
    next_retry_at    INTEGER,
    lease_expires_at INTEGER,
    last_error       TEXT NOT NULL DEFAULT '',
    received_at      INTEGER NOT NULL,
    delivered_at     INTEGER,
    acked_at         INTEGER,
    dlq_at           INTEGER,
    correlation_id   TEXT NOT NULL DEFAULT '',
    updated_at       INTEGER NOT NULL,
    retry_delays_ms  TEXT,
    body_id          INTEGER,
    UNIQUE (host_id, source, event_id)
) STRICT;

INSERT INTO deliveries_keyed (rowid, delivery_id, host_id, source, event_id, event_type, event_action, headers,
        body_size, status, attempts, max_attempts, next_retry_at, lease_expires_at, last_error, received_at,
        delivered_at, acked_at, dlq_at, correlation_id, updated_at, retry_delays_ms, body_id)
    SELECT rowid, delivery_id, host_id, source, event_id, event_type, event_action, headers,
        body_size, status, attempts, max_attempts, next_retry_at, lease_expires_at, last_error, received_at,
        delivered_at, acked_at, dlq_at, correlation_id, updated_at, retry_delays_ms, body_id
    FROM deliveries ORDER BY rowid;
DROP TABLE deliveries;
ALTER TABLE deliveries_keyed RENAME TO deliveries;

CREATE UNIQUE INDEX deliveries_key_idx ON deliveries (substr(delivery_id, -13), delivery_id);
CREATE INDEX deliveries_available_idx ON deliveries (host_id, received_at, delivery_id)
    WHERE status IN ('queued', 'retrying');
CREATE INDEX deliveries_lease_idx ON deliveries (lease_expires_at)
    WHERE status IN ('delivering', 'delivered');
CREATE INDEX deliveries_host_received_idx ON deliveries (host_id, received_at DESC, delivery_id DESC);
CREATE INDEX deliveries_received_idx ON deliveries (received_at, delivery_id);
CREATE INDEX deliveries_acked_idx ON deliveries (updated_at, host_id) WHERE status = 'acked';
CREATE INDEX deliveries_dlq_idx ON deliveries (updated_at, host_id) WHERE status = 'dlq';
CREATE INDEX deliveries_retrying_idx ON deliveries (updated_at, host_id) WHERE status = 'retrying';
CREATE INDEX deliveries_host_status_idx ON deliveries (host_id, status, received_at DESC, delivery_id DESC);

-- +goose StatementBegin
CREATE TRIGGER delivery_bodies_delete AFTER DELETE ON deliveries
BEGIN
    DELETE FROM delivery_bodies WHERE id = OLD.body_id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER delivery_events_delete AFTER DELETE ON deliveries
BEGIN
    DELETE FROM delivery_events
    WHERE substr(delivery_id, -13) = substr(OLD.delivery_id, -13) AND delivery_id = OLD.delivery_id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER delivery_results_delete AFTER DELETE ON deliveries
BEGIN
    DELETE FROM delivery_results WHERE delivery_id = OLD.delivery_id;
END;
-- +goose StatementEnd

-- +goose Down
CREATE TABLE deliveries_by_id (
    delivery_id      TEXT PRIMARY KEY,
    host_id          TEXT NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
    source           TEXT NOT NULL,
    event_id         TEXT NOT NULL,
    event_type       TEXT NOT NULL DEFAULT '',
    event_action     TEXT NOT NULL DEFAULT '',
    headers          TEXT NOT NULL,
    body_size        INTEGER NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('queued', 'delivering', 'delivered', 'acked', 'retrying', 'dlq')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL,
    next_retry_at    INTEGER,
    lease_expires_at INTEGER,
    last_error       TEXT NOT NULL DEFAULT '',
    received_at      INTEGER NOT NULL,
    delivered_at     INTEGER,
    acked_at         INTEGER,
    dlq_at           INTEGER,
    correlation_id   TEXT NOT NULL DEFAULT '',
    updated_at       INTEGER NOT NULL,
    retry_delays_ms  TEXT,
    body_id          INTEGER,
    UNIQUE (host_id, source, event_id)
) STRICT;

INSERT INTO deliveries_by_id (rowid, delivery_id, host_id, source, event_id, event_type, event_action, headers,
        body_size, status, attempts, max_attempts, next_retry_at, lease_expires_at, last_error, received_at,
        delivered_at, acked_at, dlq_at, correlation_id, updated_at, retry_delays_ms, body_id)
    SELECT rowid, delivery_id, host_id, source, event_id, event_type, event_action, headers,
        body_size, status, attempts, max_attempts, next_retry_at, lease_expires_at, last_error, received_at,
        delivered_at, acked_at, dlq_at, correlation_id, updated_at, retry_delays_ms, body_id
    FROM deliveries ORDER BY rowid;
DROP TABLE deliveries;
ALTER TABLE deliveries_by_id RENAME TO deliveries;

CREATE INDEX deliveries_available_idx ON deliveries (host_id, received_at, delivery_id)
    WHERE status IN ('queued', 'retrying');
CREATE INDEX deliveries_lease_idx ON deliveries (lease_expires_at)
    WHERE status IN ('delivering', 'delivered');
CREATE INDEX deliveries_host_received_idx ON deliveries (host_id, received_at DESC, delivery_id DESC);
CREATE INDEX deliveries_received_idx ON deliveries (received_at, delivery_id);
CREATE INDEX deliveries_acked_idx ON deliveries (updated_at, host_id) WHERE status = 'acked';
CREATE INDEX deliveries_dlq_idx ON deliveries (updated_at, host_id) WHERE status = 'dlq';
CREATE INDEX deliveries_retrying_idx ON deliveries (updated_at, host_id) WHERE status = 'retrying';
CREATE INDEX deliveries_host_status_idx ON deliveries (host_id, status, received_at DESC, delivery_id DESC);

-- +goose StatementBegin
CREATE TRIGGER delivery_bodies_delete AFTER DELETE ON deliveries
BEGIN
    DELETE FROM delivery_bodies WHERE id = OLD.body_id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER delivery_events_delete AFTER DELETE ON deliveries
BEGIN
    DELETE FROM delivery_events
    WHERE substr(delivery_id, -13) = substr(OLD.delivery_id, -13) AND delivery_id = OLD.delivery_id;
END;
-- +goose StatementEnd

CREATE TABLE delivery_results_by_delivery (
    delivery_id     TEXT PRIMARY KEY REFERENCES deliveries (delivery_id) ON DELETE CASCADE,
    attempt         INTEGER NOT NULL DEFAULT 0,
    result          TEXT NOT NULL,
    handler         TEXT NOT NULL DEFAULT '',
    response_status INTEGER,
    exit_code       INTEGER,
    duration_ms     INTEGER NOT NULL DEFAULT 0,
    error           TEXT NOT NULL DEFAULT '',
    reported_at     INTEGER NOT NULL
) STRICT;

INSERT INTO delivery_results_by_delivery (delivery_id, attempt, result, handler, response_status, exit_code, duration_ms, error, reported_at)
    SELECT r.delivery_id, r.attempt, r.result, r.handler, r.response_status, r.exit_code, r.duration_ms, r.error, r.reported_at
    FROM delivery_results r WHERE EXISTS (SELECT 1 FROM deliveries d WHERE d.delivery_id = r.delivery_id);
DROP TABLE delivery_results;
ALTER TABLE delivery_results_by_delivery RENAME TO delivery_results;
