-- +goose Up
-- The console's volume chart counts, per hour of the last day, the
-- deliveries that entered each finished or failing status: acked and
-- dead-lettered read their retention indexes (updated_at is when they
-- entered the status); retrying ones get the same partial index, which
-- only failed attempts and whatever leaves retrying write.
CREATE INDEX deliveries_retrying_idx ON deliveries (updated_at) WHERE status = 'retrying';

-- +goose Down
DROP INDEX deliveries_retrying_idx;
