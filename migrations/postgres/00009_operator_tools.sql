-- +goose Up
-- What a host's ledger recorded of a delivery's last handler run, as the
-- host reported it with its ack or nack; and receipt order across hosts for
-- the operator's newest-first listing (appended to, as deliveries arrive).
-- Lookups by event id use the (host, source, event id) key; there is no
-- index of random values (event or correlation ids), whose every insert
-- would land on a random page.
CREATE TABLE delivery_results (
    delivery_id     text PRIMARY KEY REFERENCES deliveries (delivery_id) ON DELETE CASCADE,
    attempt         integer NOT NULL DEFAULT 0,
    result          text NOT NULL,
    handler         text NOT NULL DEFAULT '',
    response_status integer,
    exit_code       integer,
    duration_ms     bigint NOT NULL DEFAULT 0,
    error           text NOT NULL DEFAULT '',
    reported_at     timestamptz NOT NULL
);

CREATE INDEX deliveries_received_idx ON deliveries (received_at, delivery_id);

-- +goose Down
DROP INDEX deliveries_received_idx;
DROP TABLE delivery_results;
