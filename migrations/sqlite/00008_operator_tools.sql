-- +goose Up
-- What a host's ledger recorded of a delivery's last handler run, as the
-- host reported it with its ack or nack; and indexes for the operator's
-- cross-host lookups (by event id, by correlation id, newest first).
CREATE TABLE delivery_results (
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

CREATE INDEX deliveries_event_idx ON deliveries (event_id);
CREATE INDEX deliveries_correlation_idx ON deliveries (correlation_id);
CREATE INDEX deliveries_received_idx ON deliveries (received_at DESC, delivery_id DESC);

-- +goose Down
DROP INDEX deliveries_received_idx;
DROP INDEX deliveries_correlation_idx;
DROP INDEX deliveries_event_idx;
DROP TABLE delivery_results;
