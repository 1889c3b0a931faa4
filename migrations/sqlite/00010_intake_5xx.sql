-- +goose Up
-- How many intake requests each replica answered with a 5xx, by minute
-- (bucket: the minute's start, unix milliseconds): every replica adds its
-- count, and the alert evaluator sums the recent minutes over all of them.
-- Buckets older than an hour are pruned by the writers.
CREATE TABLE intake_5xx (
    bucket  INTEGER NOT NULL,
    replica TEXT NOT NULL,
    count   INTEGER NOT NULL,
    PRIMARY KEY (bucket, replica)
) STRICT;

-- +goose Down
DROP TABLE intake_5xx;
