-- +goose Up
-- Host presence, alerts and where they go. Times are INTEGER unix
-- milliseconds (UTC).

-- Each host's presence as last recorded by the alert evaluator, and its
-- history: one event per change, with how long the previous state lasted.
CREATE TABLE host_presence (
    host_id TEXT PRIMARY KEY REFERENCES hosts (id) ON DELETE CASCADE,
    state   TEXT NOT NULL CHECK (state IN ('online', 'late', 'offline')),
    since   INTEGER NOT NULL
) STRICT;

CREATE TABLE host_presence_events (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    host_id   TEXT NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
    at        INTEGER NOT NULL,
    from_state TEXT NOT NULL DEFAULT '',
    to_state  TEXT NOT NULL,
    lasted_ms INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE INDEX host_presence_events_host_idx ON host_presence_events (host_id, id);

-- Named leases: which replica runs a singleton job (the alert evaluator).
CREATE TABLE leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;

-- Alerts: one row per episode of a rule's condition on a key (a host, a
-- host's source, or the whole cloud). At most one firing per rule and key.
CREATE TABLE alerts (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    rule         TEXT NOT NULL,
    alert_key    TEXT NOT NULL,
    host_id      TEXT NOT NULL DEFAULT '',
    source       TEXT NOT NULL DEFAULT '',
    summary      TEXT NOT NULL,
    started_at   INTEGER NOT NULL,
    last_sent_at INTEGER NOT NULL,
    resolved_at  INTEGER
) STRICT;

CREATE UNIQUE INDEX alerts_firing_idx ON alerts (rule, alert_key) WHERE resolved_at IS NULL;

-- Per-host (host_id '' : every host) settings of the built-in rules.
CREATE TABLE alert_rules (
    host_id   TEXT NOT NULL,
    rule      TEXT NOT NULL,
    disabled  INTEGER NOT NULL DEFAULT 0,
    threshold INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (host_id, rule)
) STRICT;

-- Where notifications go; url and secret are sealed with the key ring.
CREATE TABLE alert_sinks (
    id            TEXT PRIMARY KEY,
    kind          TEXT NOT NULL CHECK (kind IN ('webhook', 'slack')),
    target        TEXT NOT NULL,
    url_sealed    TEXT NOT NULL,
    secret_sealed TEXT NOT NULL DEFAULT '',
    created_at    INTEGER NOT NULL,
    sent          INTEGER NOT NULL DEFAULT 0,
    failures      INTEGER NOT NULL DEFAULT 0,
    failing_since INTEGER,
    last_error    TEXT NOT NULL DEFAULT '',
    last_error_at INTEGER
) STRICT;

-- The outbox: one row per notification and sink, written with the alert's
-- transition, deleted once the sink took it.
CREATE TABLE alert_outbox (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    sink_id     TEXT NOT NULL REFERENCES alert_sinks (id) ON DELETE CASCADE,
    alert_id    INTEGER NOT NULL,
    payload     TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    next_at     INTEGER NOT NULL
) STRICT;

-- Each sink's queue, in order: only its head is sent, so that a sink that
-- was down gets its notifications in the order they were queued.
CREATE INDEX alert_outbox_sink_idx ON alert_outbox (sink_id, id);

-- +goose Down
DROP TABLE alert_outbox;
DROP TABLE alert_sinks;
DROP TABLE alert_rules;
DROP TABLE alerts;
DROP TABLE leases;
DROP TABLE host_presence_events;
DROP TABLE host_presence;
