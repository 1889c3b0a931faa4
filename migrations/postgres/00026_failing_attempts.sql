-- +goose NO TRANSACTION
-- +goose Up
-- The alert evaluator's failing sources (every 15 s) grouped every
-- retrying delivery by host and source for the most attempts of each: 2 %
-- of a week's store is retrying, 100,000 deliveries at 5 million, most
-- having failed once. This index holds the retrying deliveries that
-- failed more than once, led by their attempts, so that the sources with
-- a delivery past the rule's threshold are a range of it;
-- deliveries_failing_idx then counts each such source's (which this one,
-- missing the deliveries that failed once, can never do in its place). It
-- is written when a delivery enters or leaves retrying, never at intake.
--
-- Built concurrently: the table's writes go on while it reads the table
-- (a build that fails leaves an invalid index, dropped first on the next
-- try; the planner never uses one).
DROP INDEX CONCURRENTLY IF EXISTS deliveries_failing_attempts_idx;
CREATE INDEX CONCURRENTLY deliveries_failing_attempts_idx ON deliveries (attempts, host_id, source)
	WHERE status = 'retrying' AND attempts >= 2;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS deliveries_failing_attempts_idx;
