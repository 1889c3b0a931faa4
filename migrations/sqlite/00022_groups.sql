-- +goose Up
-- Groups of hosts. A group has a public URL of its own on the intake path
-- (/api/webhooks/:groupId/:source), its own sources and an ordered list of
-- members. Its sources live in sources beside the hosts' (keyed by the
-- group's id, which never collides with a host's: g_… against h_…), so the
-- source's foreign key to hosts goes; sources gain a mode (fanout or any,
-- '' for a host's own).
--
-- A group's webhook is stored as deliveries of its members: host_id is the
-- member that holds it (fanout: each member its own; any: the one it is
-- handed to, which changes on failover), group_id the group and lane the
-- member of a fanout delivery ('' otherwise). The dedupe key of a host's
-- own deliveries stays (host, source, event id); a group's is (group,
-- source, event id, lane), so that a member's own source and a group's of
-- the same name never take each other's events, and an any delivery stays
-- one however often it changes hands. SQLite cannot drop the old unique
-- constraint: the table is rebuilt with its rowids, indexes and triggers.
--
-- A fanout's deliveries share one stored body (the same body_id): the
-- trigger that deletes a body with its delivery keeps it while another
-- delivery of the fanout still points at it.
CREATE TABLE host_groups (
    id                 TEXT PRIMARY KEY,
    name               TEXT NOT NULL,
    status             TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'deactivated')),
    rate_limit_per_min INTEGER NOT NULL DEFAULT 0,
    rate_limit_burst   INTEGER NOT NULL DEFAULT 0,
    created_at         INTEGER NOT NULL,
    deactivated_at     INTEGER
) STRICT;

CREATE TABLE group_members (
    group_id TEXT NOT NULL REFERENCES host_groups (id) ON DELETE CASCADE,
    host_id  TEXT NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    added_at INTEGER NOT NULL,
    PRIMARY KEY (group_id, host_id)
) STRICT;

CREATE INDEX group_members_host_idx ON group_members (host_id);

CREATE TABLE sources_owned (
    host_id         TEXT NOT NULL,
    name            TEXT NOT NULL,
    provider        TEXT NOT NULL,
    enabled         INTEGER NOT NULL,
    events          TEXT NOT NULL DEFAULT '[]',
    secrets         TEXT NOT NULL DEFAULT '[]',
    options         TEXT NOT NULL DEFAULT '{}',
    max_body_bytes  INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    retry_delays_ms TEXT,
    max_attempts    INTEGER NOT NULL DEFAULT 0,
    allowed_ips     TEXT NOT NULL DEFAULT '[]',
    mode            TEXT NOT NULL DEFAULT '' CHECK (mode IN ('', 'fanout', 'any')),
    PRIMARY KEY (host_id, name)
) STRICT;

INSERT INTO sources_owned (host_id, name, provider, enabled, events, secrets, options, max_body_bytes, created_at,
        updated_at, retry_delays_ms, max_attempts, allowed_ips)
    SELECT host_id, name, provider, enabled, events, secrets, options, max_body_bytes, created_at,
        updated_at, retry_delays_ms, max_attempts, allowed_ips FROM sources;
DROP TABLE sources;
ALTER TABLE sources_owned RENAME TO sources;

CREATE TABLE deliveries_grouped (
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
    body_sha256      BLOB,
    group_id         TEXT NOT NULL DEFAULT '',
    lane             TEXT NOT NULL DEFAULT ''
) STRICT;

INSERT INTO deliveries_grouped (rowid, delivery_id, host_id, source, event_id, event_type, event_action, headers,
        body_size, status, attempts, max_attempts, next_retry_at, lease_expires_at, last_error, received_at,
        delivered_at, acked_at, dlq_at, correlation_id, updated_at, retry_delays_ms, body_id, body_sha256)
    SELECT rowid, delivery_id, host_id, source, event_id, event_type, event_action, headers,
        body_size, status, attempts, max_attempts, next_retry_at, lease_expires_at, last_error, received_at,
        delivered_at, acked_at, dlq_at, correlation_id, updated_at, retry_delays_ms, body_id, body_sha256
    FROM deliveries ORDER BY rowid;
DROP TABLE deliveries;
ALTER TABLE deliveries_grouped RENAME TO deliveries;

CREATE UNIQUE INDEX deliveries_key_idx ON deliveries (substr(delivery_id, -13), delivery_id);
CREATE UNIQUE INDEX deliveries_event_idx ON deliveries (host_id, source, event_id) WHERE group_id = '';
CREATE UNIQUE INDEX deliveries_group_event_idx ON deliveries (group_id, source, event_id, lane) WHERE group_id <> '';
CREATE INDEX deliveries_available_idx ON deliveries (host_id, received_at, delivery_id)
    WHERE status IN ('queued', 'retrying');
CREATE INDEX deliveries_lease_idx ON deliveries (lease_expires_at)
    WHERE status IN ('delivering', 'delivered');
CREATE INDEX deliveries_host_received_idx ON deliveries (host_id, received_at DESC, delivery_id DESC);
CREATE INDEX deliveries_received_idx ON deliveries (received_at, delivery_id);
CREATE INDEX deliveries_acked_idx ON deliveries (updated_at, host_id) WHERE status = 'acked';
CREATE INDEX deliveries_dlq_idx ON deliveries (updated_at, host_id, dlq_at) WHERE status = 'dlq';
CREATE INDEX deliveries_retrying_idx ON deliveries (updated_at, host_id) WHERE status = 'retrying';
CREATE INDEX deliveries_host_status_idx ON deliveries (host_id, status, received_at DESC, delivery_id DESC);
CREATE INDEX deliveries_body_digest_idx ON deliveries (host_id, source, body_sha256, received_at)
    WHERE body_sha256 IS NOT NULL;
-- A fanout's deliveries by their shared body, for the body's deletion.
CREATE INDEX deliveries_fanout_body_idx ON deliveries (body_id) WHERE lane <> '';
-- A group's deliveries, newest first (the group's page, by member).
CREATE INDEX deliveries_group_received_idx ON deliveries (group_id, received_at DESC, delivery_id DESC)
    WHERE group_id <> '';
-- A group's deliveries by body, for its sources' replay guard.
CREATE INDEX deliveries_group_digest_idx ON deliveries (group_id, source, body_sha256, received_at)
    WHERE group_id <> '' AND body_sha256 IS NOT NULL;
-- An any group's deliveries waiting, for failover.
CREATE INDEX deliveries_group_waiting_idx ON deliveries (group_id, host_id, received_at)
    WHERE group_id <> '' AND lane = '' AND status IN ('queued', 'retrying');

-- +goose StatementBegin
CREATE TRIGGER delivery_bodies_delete AFTER DELETE ON deliveries WHEN OLD.lane = ''
BEGIN
    DELETE FROM delivery_bodies WHERE id = OLD.body_id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER delivery_bodies_delete_fanout AFTER DELETE ON deliveries WHEN OLD.lane <> ''
BEGIN
    DELETE FROM delivery_bodies WHERE id = OLD.body_id
        AND NOT EXISTS (SELECT 1 FROM deliveries WHERE body_id = OLD.body_id AND lane <> '');
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
    DELETE FROM delivery_results
    WHERE substr(delivery_id, -13) = substr(OLD.delivery_id, -13) AND delivery_id = OLD.delivery_id;
END;
-- +goose StatementEnd

-- +goose Down
DELETE FROM deliveries WHERE group_id <> '';
DROP INDEX deliveries_group_waiting_idx;
DROP INDEX deliveries_group_digest_idx;
DROP INDEX deliveries_group_received_idx;
DROP INDEX deliveries_fanout_body_idx;
DROP INDEX deliveries_group_event_idx;
DROP INDEX deliveries_event_idx;
DROP TRIGGER delivery_bodies_delete_fanout;
DROP TRIGGER delivery_bodies_delete;
-- +goose StatementBegin
CREATE TRIGGER delivery_bodies_delete AFTER DELETE ON deliveries
BEGIN
    DELETE FROM delivery_bodies WHERE id = OLD.body_id;
END;
-- +goose StatementEnd
CREATE UNIQUE INDEX deliveries_event_idx ON deliveries (host_id, source, event_id);
ALTER TABLE deliveries DROP COLUMN lane;
ALTER TABLE deliveries DROP COLUMN group_id;
DELETE FROM sources WHERE host_id NOT IN (SELECT id FROM hosts);
ALTER TABLE sources DROP COLUMN mode;
DROP TABLE group_members;
DROP TABLE host_groups;
