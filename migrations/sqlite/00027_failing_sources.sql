-- +goose Up
-- The alert evaluator's failing sources (every 15 s): each host's and
-- source's retrying deliveries, the most attempts among them. The partial
-- index of retrying deliveries held their update time and host only, so
-- each one was read from the table: 20,000 rows at a million deliveries
-- (one evaluation of every rule took 145 ms at p50 there). This one holds
-- what the query reads, in its order; it is written when a delivery
-- enters or leaves retrying, never at intake.
CREATE INDEX deliveries_failing_idx ON deliveries (host_id, source, attempts) WHERE status = 'retrying';

-- +goose Down
DROP INDEX deliveries_failing_idx;
