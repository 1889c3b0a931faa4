-- +goose Up
-- The alert evaluator's failing sources (every 15 s) grouped every
-- retrying delivery by host and source for the most attempts of each: 2 %
-- of a week's store is retrying, 100,000 deliveries at 5 million, most
-- having failed once. This index leads with the attempts, so that the
-- sources with a delivery past the rule's threshold are a range of it;
-- deliveries_failing_idx then counts each such source's. Like that one,
-- it is written when a delivery enters or leaves retrying, never at
-- intake.
CREATE INDEX deliveries_failing_attempts_idx ON deliveries (attempts, host_id, source) WHERE status = 'retrying';

-- +goose Down
DROP INDEX deliveries_failing_attempts_idx;
