-- +goose Up
-- How many intake requests each replica answered with a 5xx, by minute
-- (bucket: the minute's start): every replica adds its count, and the
-- alert evaluator sums the recent minutes over all of them. Buckets older
-- than an hour are pruned by the writers.
CREATE TABLE intake_5xx (
    bucket  timestamptz NOT NULL,
    replica text NOT NULL,
    count   bigint NOT NULL,
    PRIMARY KEY (bucket, replica)
);

-- +goose Down
DROP TABLE intake_5xx;
