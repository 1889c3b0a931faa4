-- +goose Up
-- The console's volume chart counts, per hour of the last day, the
-- deliveries that entered each finished or failing status, of the relay or
-- of one host. The partial index of each such status is on (updated_at,
-- host_id): the time is when the delivery entered the status, and the
-- host makes a host's count read the index alone, not its rows. Retention
-- still reads acked and dead-lettered ones by updated_at; retrying ones get
-- the same index, which only failed attempts and whatever leaves retrying
-- write.
DROP INDEX deliveries_acked_idx;
DROP INDEX deliveries_dlq_idx;
CREATE INDEX deliveries_acked_idx ON deliveries (updated_at, host_id) WHERE status = 'acked';
CREATE INDEX deliveries_dlq_idx ON deliveries (updated_at, host_id) WHERE status = 'dlq';
CREATE INDEX deliveries_retrying_idx ON deliveries (updated_at, host_id) WHERE status = 'retrying';

-- +goose Down
DROP INDEX deliveries_retrying_idx;
DROP INDEX deliveries_dlq_idx;
DROP INDEX deliveries_acked_idx;
CREATE INDEX deliveries_acked_idx ON deliveries (updated_at) WHERE status = 'acked';
CREATE INDEX deliveries_dlq_idx ON deliveries (updated_at) WHERE status = 'dlq';
