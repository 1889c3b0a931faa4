-- +goose Up
-- A host's deliveries in one status, newest first (the console's and
-- GET /api/deliveries' host and status filters) read one index in order:
-- (host_id, status) alone left SQLite, which keeps no statistics, walking
-- the host's whole receipt order for a status that is rare (the leased of a
-- host with 33,000 deliveries: 110 ms). The entry stays where it is while
-- the status stays, so the extra columns cost bytes, not page splits.
DROP INDEX deliveries_host_status_idx;
CREATE INDEX deliveries_host_status_idx ON deliveries (host_id, status, received_at DESC, delivery_id DESC);

-- +goose Down
DROP INDEX deliveries_host_status_idx;
CREATE INDEX deliveries_host_status_idx ON deliveries (host_id, status);
