-- +goose NO TRANSACTION
-- +goose Up
-- The audit trail of every delivery in order (GET /api/events, which
-- `cloud ctl tail` asks every second) reads events by their id: after an
-- id, or the newest. No index of delivery_events was led by it since
-- migration 6 (its key leads with the delivery), so each call read the
-- whole trail twice, two to three events a stored delivery: some 25
-- million rows at 10 million stored. Ids are
-- handed out in order, so each new event's entry is appended to the
-- index's right edge.
--
-- Built concurrently, as migration 26 is: writes go on meanwhile.
DROP INDEX CONCURRENTLY IF EXISTS delivery_events_id_idx;
CREATE UNIQUE INDEX CONCURRENTLY delivery_events_id_idx ON delivery_events (id);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS delivery_events_id_idx;
