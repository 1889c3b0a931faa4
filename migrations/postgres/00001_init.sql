-- +goose Up
CREATE TABLE hosts (
    id                 text PRIMARY KEY,
    name               text NOT NULL,
    status             text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'deactivated')),
    generation         bigint NOT NULL DEFAULT 1,
    credential_hash    bytea,
    claim_code_hash    bytea,
    claim_expires_at   timestamptz,
    claimed_at         timestamptz,
    agent_version      text NOT NULL DEFAULT '',
    last_heartbeat_at  timestamptz,
    subscription       json,
    rate_limit_per_min integer NOT NULL DEFAULT 0,
    rate_limit_burst   integer NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL,
    deactivated_at     timestamptz
);

CREATE UNIQUE INDEX hosts_claim_code_hash_idx ON hosts (claim_code_hash) WHERE claim_code_hash IS NOT NULL;

CREATE TABLE sources (
    host_id        text NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
    name           text NOT NULL,
    provider       text NOT NULL,
    enabled        boolean NOT NULL,
    events         jsonb NOT NULL DEFAULT '[]',
    secrets        jsonb NOT NULL DEFAULT '[]',
    options        jsonb NOT NULL DEFAULT '{}',
    max_body_bytes bigint NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    PRIMARY KEY (host_id, name)
);

CREATE TABLE deliveries (
    delivery_id      text PRIMARY KEY,
    host_id          text NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
    source           text NOT NULL,
    event_id         text NOT NULL,
    event_type       text NOT NULL DEFAULT '',
    event_action     text NOT NULL DEFAULT '',
    -- json, not jsonb: kept as the text that was written.
    headers          json NOT NULL,
    raw_body         bytea NOT NULL,
    body_size        integer NOT NULL,
    status           text NOT NULL CHECK (status IN ('queued', 'delivering', 'delivered', 'acked', 'retrying', 'dlq')),
    attempts         integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL,
    next_retry_at    timestamptz,
    lease_expires_at timestamptz,
    last_error       text NOT NULL DEFAULT '',
    received_at      timestamptz NOT NULL,
    delivered_at     timestamptz,
    acked_at         timestamptz,
    dlq_at           timestamptz,
    correlation_id   text NOT NULL DEFAULT '',
    updated_at       timestamptz NOT NULL,
    UNIQUE (host_id, source, event_id)
);

-- Claiming: a host's available deliveries in FIFO order.
CREATE INDEX deliveries_available_idx ON deliveries (host_id, received_at, delivery_id)
    WHERE status IN ('queued', 'retrying');
-- Lease expiry sweeps.
CREATE INDEX deliveries_lease_idx ON deliveries (lease_expires_at)
    WHERE status IN ('delivering', 'delivered');
-- Listing, newest first, with a keyset cursor.
CREATE INDEX deliveries_host_received_idx ON deliveries (host_id, received_at DESC, delivery_id DESC);
-- Retention sweeps of finished deliveries.
CREATE INDEX deliveries_status_updated_idx ON deliveries (status, updated_at);

CREATE TABLE delivery_events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id text NOT NULL REFERENCES deliveries (delivery_id) ON DELETE CASCADE,
    at          timestamptz NOT NULL,
    from_status text NOT NULL DEFAULT '',
    to_status   text NOT NULL,
    reason      text NOT NULL,
    attempt     integer NOT NULL
);

CREATE INDEX delivery_events_delivery_idx ON delivery_events (delivery_id, id);

-- +goose Down
DROP TABLE delivery_events;
DROP TABLE deliveries;
DROP TABLE sources;
DROP TABLE hosts;
