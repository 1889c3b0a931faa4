-- +goose Up
-- Webhooks per hour by host and outcome, kept as they pass (the console's
-- volume chart and its hosts' sparklines): counting them from the
-- deliveries read every delivery of the window, a day of them, on every
-- page. A sweep job folds, every minute, what happened from the last fold
-- up to two minutes ago (DeliveryVolumeFold); a read adds the hours kept
-- to a count of what came since (store.DeliveryVolume). host_id '' holds
-- every host's sum. hour is the hour's start, unix milliseconds.
CREATE TABLE delivery_volume (
    hour    INTEGER NOT NULL,
    host_id TEXT    NOT NULL,
    outcome TEXT    NOT NULL,
    n       INTEGER NOT NULL,
    PRIMARY KEY (host_id, hour, outcome)
) WITHOUT ROWID;
-- Every host's received webhooks of a window (the hosts page).
CREATE INDEX delivery_volume_outcome_idx ON delivery_volume (outcome, hour, host_id, n);

-- Up to when the volume is kept (one row, id 1): everything before it is
-- in delivery_volume.
CREATE TABLE delivery_volume_folded (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    until INTEGER NOT NULL
);

-- +goose Down
DROP TABLE delivery_volume_folded;
DROP INDEX delivery_volume_outcome_idx;
DROP TABLE delivery_volume;
