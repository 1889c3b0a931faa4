-- +goose Up
-- The alert evaluator's backlog (every 15 s) counts each host's dead
-- letters and those dead-lettered in the last hour: dlq_at, which was in
-- no index, made it read every dead letter's row (95–112 ms with 101,000
-- of them). With dlq_at in the partial index of dead letters it reads that
-- index alone; retention and the volume chart read it as before, by
-- (updated_at, host_id).
DROP INDEX deliveries_dlq_idx;
CREATE INDEX deliveries_dlq_idx ON deliveries (updated_at, host_id, dlq_at) WHERE status = 'dlq';

-- +goose Down
DROP INDEX deliveries_dlq_idx;
CREATE INDEX deliveries_dlq_idx ON deliveries (updated_at, host_id) WHERE status = 'dlq';
