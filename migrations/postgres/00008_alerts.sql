-- +goose Up
-- Host presence, alerts and where they go.

-- Each host's presence as last recorded by the alert evaluator, and its
-- history: one event per change, with how long the previous state lasted.
CREATE TABLE host_presence (
    host_id text PRIMARY KEY REFERENCES hosts (id) ON DELETE CASCADE,
    state   text NOT NULL CHECK (state IN ('online', 'late', 'offline')),
    since   timestamptz NOT NULL
);

CREATE TABLE host_presence_events (
    id        bigserial PRIMARY KEY,
    host_id   text NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
    at        timestamptz NOT NULL,
    from_state text NOT NULL DEFAULT '',
    to_state  text NOT NULL,
    lasted_ms bigint NOT NULL DEFAULT 0
);

CREATE INDEX host_presence_events_host_idx ON host_presence_events (host_id, id);

-- Named leases: which replica runs a singleton job (the alert evaluator).
CREATE TABLE leases (
    name       text PRIMARY KEY,
    holder     text NOT NULL,
    expires_at timestamptz NOT NULL
);

-- Alerts: one row per episode of a rule's condition on a key (a host, a
-- host's source, or the whole cloud). At most one firing per rule and key.
CREATE TABLE alerts (
    id           bigserial PRIMARY KEY,
    rule         text NOT NULL,
    alert_key    text NOT NULL,
    host_id      text NOT NULL DEFAULT '',
    source       text NOT NULL DEFAULT '',
    summary      text NOT NULL,
    started_at   timestamptz NOT NULL,
    last_sent_at timestamptz NOT NULL,
    resolved_at  timestamptz
);

CREATE UNIQUE INDEX alerts_firing_idx ON alerts (rule, alert_key) WHERE resolved_at IS NULL;

-- Per-host (host_id '' : every host) settings of the built-in rules.
CREATE TABLE alert_rules (
    host_id   text NOT NULL,
    rule      text NOT NULL,
    disabled  boolean NOT NULL DEFAULT false,
    threshold bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (host_id, rule)
);

-- Where notifications go; url and secret are sealed with the key ring.
CREATE TABLE alert_sinks (
    id            text PRIMARY KEY,
    kind          text NOT NULL CHECK (kind IN ('webhook', 'slack')),
    target        text NOT NULL,
    url_sealed    text NOT NULL,
    secret_sealed text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL,
    sent          bigint NOT NULL DEFAULT 0,
    failures      bigint NOT NULL DEFAULT 0,
    failing_since timestamptz,
    last_error    text NOT NULL DEFAULT '',
    last_error_at timestamptz
);

-- The outbox: one row per notification and sink, written with the alert's
-- transition, deleted once the sink took it.
CREATE TABLE alert_outbox (
    id          bigserial PRIMARY KEY,
    sink_id     text NOT NULL REFERENCES alert_sinks (id) ON DELETE CASCADE,
    alert_id    bigint NOT NULL,
    payload     text NOT NULL,
    created_at  timestamptz NOT NULL,
    attempts    bigint NOT NULL DEFAULT 0,
    next_at     timestamptz NOT NULL
);

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
