-- +goose Up
-- Times are INTEGER unix milliseconds (UTC).
CREATE TABLE hosts (
    id                 TEXT PRIMARY KEY,
    name               TEXT NOT NULL,
    status             TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'deactivated')),
    generation         INTEGER NOT NULL DEFAULT 1,
    credential_hash    BLOB,
    claim_code_hash    BLOB,
    claim_expires_at   INTEGER,
    claimed_at         INTEGER,
    agent_version      TEXT NOT NULL DEFAULT '',
    last_heartbeat_at  INTEGER,
    subscription       TEXT,
    rate_limit_per_min INTEGER NOT NULL DEFAULT 0,
    rate_limit_burst   INTEGER NOT NULL DEFAULT 0,
    created_at         INTEGER NOT NULL,
    deactivated_at     INTEGER
) STRICT;

CREATE UNIQUE INDEX hosts_claim_code_hash_idx ON hosts (claim_code_hash) WHERE claim_code_hash IS NOT NULL;

CREATE TABLE sources (
    host_id        TEXT NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
    name           TEXT NOT NULL,
    provider       TEXT NOT NULL,
    enabled        INTEGER NOT NULL,
    events         TEXT NOT NULL DEFAULT '[]',
    secrets        TEXT NOT NULL DEFAULT '[]',
    options        TEXT NOT NULL DEFAULT '{}',
    max_body_bytes INTEGER NOT NULL DEFAULT 0,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    PRIMARY KEY (host_id, name)
) STRICT;

CREATE TABLE deliveries (
    delivery_id      TEXT PRIMARY KEY,
    host_id          TEXT NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
    source           TEXT NOT NULL,
    event_id         TEXT NOT NULL,
    event_type       TEXT NOT NULL DEFAULT '',
    event_action     TEXT NOT NULL DEFAULT '',
    headers          TEXT NOT NULL,
    raw_body         BLOB NOT NULL,
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
    UNIQUE (host_id, source, event_id)
) STRICT;

CREATE INDEX deliveries_available_idx ON deliveries (host_id, received_at, delivery_id)
    WHERE status IN ('queued', 'retrying');
CREATE INDEX deliveries_lease_idx ON deliveries (lease_expires_at)
    WHERE status IN ('delivering', 'delivered');
CREATE INDEX deliveries_host_received_idx ON deliveries (host_id, received_at DESC, delivery_id DESC);
CREATE INDEX deliveries_status_updated_idx ON deliveries (status, updated_at);

CREATE TABLE delivery_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id TEXT NOT NULL REFERENCES deliveries (delivery_id) ON DELETE CASCADE,
    at          INTEGER NOT NULL,
    from_status TEXT NOT NULL DEFAULT '',
    to_status   TEXT NOT NULL,
    reason      TEXT NOT NULL,
    attempt     INTEGER NOT NULL
) STRICT;

CREATE INDEX delivery_events_delivery_idx ON delivery_events (delivery_id, id);

-- +goose Down
DROP TABLE delivery_events;
DROP TABLE deliveries;
DROP TABLE sources;
DROP TABLE hosts;
